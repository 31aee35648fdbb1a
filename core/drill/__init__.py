"""Burst drills: run a query through a rate burst under several scaling policies and report how each coped."""
