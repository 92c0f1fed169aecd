"""Stand-in for the `spack_repo` namespace (offline tests only; see ../README.md)."""
