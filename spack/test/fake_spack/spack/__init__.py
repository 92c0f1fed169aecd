"""Stand-in for the `spack` package (offline tests only; see ../README.md)."""
