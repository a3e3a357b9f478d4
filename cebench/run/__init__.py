"""Running a sweep's points: one at a time, in isolation or as ranks, planned and sharded."""
