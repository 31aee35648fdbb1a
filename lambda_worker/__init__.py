"""The Lambda worker: a thin Powertools handler that runs transient operators on Arrow batches."""
