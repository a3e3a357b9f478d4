"""The prediction engine: one step traced on `meta` (or fake) tensors under a storage tracker
(`trace`, `tracker`), inductor's code run on them (`compiled`), the fake world of ranks
(`fake_world`), extrapolation along rows and blocks (`series`), each point's row and the
largest batch that fits (`points`), and whether a point can run, be predicted and be timed
(`support`). What it changes or reads of torch, Triton and the peers is declared in
`cebench.shims`; the API's `cebench.predict` is the function that calls it."""
