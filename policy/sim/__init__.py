"""Sponge at paper scale, simulated: 5 VMs x 4 cores, up to 200 Lambdas, NEXMark Q1-Q8.

Modules, one idea each: costs (what was measured here, what the paper says, what is derived),
engine (the fluid FIFO cluster with its timeline of discrete events), strategies (the six policies;
sponge drives the real policy/offload_policy.py), metrics (latency by inverting the queues),
experiment (a simulated drill's report.json, the Q1-Q8 summary and the Fig. 15(b) cost curve).
Every figure it produces is labelled "simulated".
"""
