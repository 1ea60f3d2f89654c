"""`morl bench TARGET`: the benchmarks whose figures go into docs/benchmarks.md."""
