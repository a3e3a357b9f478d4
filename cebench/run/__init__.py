"""Running a sweep: one point at a time, in isolation, planned and sharded."""
