"""The offloading policy: what to watch (CPU, input rate, backlog), when to offload, to how many workers."""
