"""What runs on a device: step time (`timing`), the matmul floor (`limits`), one step's profiled
allocations (`allocations`), the timeline both they and a prediction return (`timeline`), and
this CPU's rates for the time model (`probe`)."""
