"""Stand-in for Spack's CudaPackage: the names hpctrain's recipe reads from it.

The real class declares the `cuda` and (multi-valued) `cuda_arch` variants and a `cuda`
dependency; here they are listed in DECLARED_VARIANTS. cuda_arch_values is a short subset
of the real list (which grows with every GPU generation). Offline tests only.
"""


class CudaPackage:
    DECLARED_VARIANTS = ("cuda", "cuda_arch")
    cuda_arch_values = ("70", "80", "86", "89", "90", "100")
