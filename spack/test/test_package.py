"""Offline checks of the hpctrain Spack recipe and environments (no Spack needed).

Spack cannot be installed in this project's CI, so this imports package.py against the
stand-ins in fake_spack/ (see fake_spack/README.md) and checks that the recipe declares what
hpctrain's CMake needs: a variant (or run_tests) per HPCTRAIN_ENABLE_<X> option, a dependency
per find_package(), cuda_arch propagated to Kokkos, and cmake_args that map them. It does
NOT concretize or build anything: a real `spack spec hpctrain` is the only proof of that.

Run: python3 spack/test/test_package.py   (or through ctest, see spack/lint.sh)
"""

import importlib.util
import os
import re
import sys
import tempfile
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SPACK_DIR = os.path.dirname(HERE)
ROOT = os.path.dirname(SPACK_DIR)
REPO = os.path.join(SPACK_DIR, "spack_repo", "hpctrain")
PACKAGE_PY = os.path.join(REPO, "packages", "hpctrain", "package.py")

sys.path.insert(0, os.path.join(HERE, "fake_spack"))
import spack.package as fake  # noqa: E402
from spack_repo.builtin.build_systems.cmake import CMakePackage  # noqa: E402
from spack_repo.builtin.build_systems.cuda import CudaPackage  # noqa: E402

# find_package()/pkg_check_modules() names in the CMake -> the Spack package providing them.
# None: comes with the compiler/OS. A name missing here fails the test on purpose: add it,
# and a depends_on() to package.py, when the CMake gains a dependency.
CMAKE_TO_SPACK = {
    "Threads": None,
    "OpenMP": None,  # the compiler's own runtime (GCC's libgomp), not a Spack package
    "MPI": "mpi",
    "CUDAToolkit": None,  # from CudaPackage (the +cuda variant), not a depends_on
    "HDF5": "hdf5",
    "Kokkos": "kokkos",
    "KokkosKernels": "kokkos-kernels",
    "BLAS": "blas",
    "LAPACK": "lapack",
    "CLI11": "cli11",
    "nlohmann_json": "nlohmann-json",
    "fmt": "fmt",
    "PkgConfig": "pkgconfig",
    "libxxhash": "xxhash",
    "httplib": "cpp-httplib",  # hpctrain::serve: a CMake package (Spack's header-only install)
    "cpp-httplib": "cpp-httplib",  # or pkg-config (Debian's compiled libcpp-httplib-dev)
    "ucx": "ucx",
    "dnnl": "onednn",
    "libxsmm": "libxsmm",
    "GTest": "googletest",
    "benchmark": "benchmark",
    "ZLIB": "zlib-api",
    "Protobuf": "protobuf",
    "Boost": "boost",
    "Python3": "python",  # optional, only for the benchmark smoke test
    "hpctrain": None,  # the downstream find_package(hpctrain) test finds ourselves
}


def load_recipe():
    start = len(fake.RECORDS)
    spec = importlib.util.spec_from_file_location("hpctrain_recipe", PACKAGE_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, fake.RECORDS[start:]


def cmake_sources():
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [
            d
            for d in dirs
            if d not in {"build", ".git", "spack"}
            and not d.startswith(".")
            and not (top == ROOT and d.startswith("build-"))  # build trees (.gitignore: /build-*/)
        ]
        for name in files:
            if name == "CMakeLists.txt" or name.endswith(".cmake"):
                yield os.path.join(top, name)


class Prefix(str):
    @property
    def bin(self):
        return os.path.join(self, "bin")


class FakeDep:
    def __init__(self, name, prefix="/opt/fake", **attrs):
        self.name = name
        self.prefix = Prefix(prefix)
        self.__dict__.update(attrs)


class FakeSpec:
    """Answers only `+v`, `~v`, `^name` and `name=value`; anything else raises."""

    def __init__(self, variants, deps):
        self.variants = variants
        self.deps = deps

    def __getitem__(self, name):
        return self.deps[name]

    def satisfies(self, query):
        query = query.strip()
        if re.fullmatch(r"\^[\w-]+", query):
            return any(d.name == query[1:] for d in self.deps.values())
        if re.fullmatch(r"[+~]\w+", query):
            return self.variants[query[1:]] is (query[0] == "+")
        if re.fullmatch(r"\w+=\w+", query):
            key, value = query.split("=")
            return str(self.variants[key]) == value
        raise NotImplementedError(f"the test spec cannot answer satisfies({query!r})")


def make_pkg(
    cls,
    tmp,
    cuda=False,
    ucx=True,
    benchmarks=True,
    run_tests=False,
    mpi="openmpi",
    onednn=True,
    with_mpi=True,
    libxsmm=None,
):
    mpi_prefix = os.path.join(tmp, mpi)
    os.makedirs(os.path.join(mpi_prefix, "bin"), exist_ok=True)
    mpiexec = os.path.join(mpi_prefix, "bin", "mpiexec")
    open(mpiexec, "w").close()
    deps = {
        "mpi": FakeDep(mpi, mpi_prefix, mpicc="/w/mpicc", mpicxx="/w/mpicxx"),
        "cmake": FakeDep("cmake", "/opt/cmake"),
    }
    variants = {
        "cuda": cuda,
        "cuda_arch": "90" if cuda else "none",
        "cuda_collectives": False,
        "nccl": False,
        "ucx": ucx,
        "onednn": onednn,
        "libxsmm": (not cuda) if libxsmm is None else libxsmm,
        "benchmarks": benchmarks,
        "openmp": False,
        "mpi": with_mpi,
    }
    kokkos = FakeDep("kokkos", kokkos_cxx="/opt/kokkos-nvcc-wrapper/bin/nvcc_wrapper")
    return cls(FakeSpec(variants, deps), run_tests, {"kokkos": kokkos}, build_directory=tmp)


class RecipeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.module, cls.records = load_recipe()
        cls.Hpctrain = cls.module.Hpctrain

    def directives(self, name):
        return [(a, k, w) for (n, a, k, w) in self.records if n == name]

    def deps(self):
        """(spec, type, conditions) for every depends_on, conditions from `when` + with-when."""
        out = []
        for args, kwargs, stack in self.directives("depends_on"):
            conds = tuple(stack) + ((kwargs["when"],) if "when" in kwargs else ())
            dtype = kwargs.get("type", ("build", "link"))
            out.append((args[0], dtype, conds))
        return out

    def dep_names(self):
        return {re.match(r"[\w-]+", s).group(0) for s, _, _ in self.deps()}

    def variant_names(self):
        own = {args[0] for args, _, _ in self.directives("variant")}
        return own | set(CudaPackage.DECLARED_VARIANTS)

    # ---- structure -------------------------------------------------------------------------
    def test_repository_layout_and_repo_yaml(self):
        with open(os.path.join(REPO, "repo.yaml")) as f:
            repo = yaml.safe_load(f)["repo"]
        self.assertEqual(repo["namespace"], "hpctrain")
        self.assertEqual(os.path.basename(REPO), repo["namespace"])
        self.assertEqual(os.path.basename(os.path.dirname(REPO)), "spack_repo")
        self.assertRegex(str(repo["api"]), r"^v2\.\d+$")

    def test_class_and_metadata(self):
        self.assertTrue(issubclass(self.Hpctrain, CMakePackage))
        self.assertTrue(issubclass(self.Hpctrain, CudaPackage))
        self.assertTrue(self.Hpctrain.__doc__ and self.Hpctrain.__doc__.strip())
        self.assertTrue(self.Hpctrain.git.endswith(".git"))
        versions = {args[0]: kwargs for args, kwargs, _ in self.directives("version")}
        self.assertEqual(versions.get("main"), {"branch": "main"})
        self.assertTrue(self.directives("maintainers"))
        self.assertTrue(self.directives("license"))

    # ---- CMake options <-> variants --------------------------------------------------------
    def test_every_enable_option_has_a_variant_or_run_tests(self):
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            options = re.findall(r"option\(\s*HPCTRAIN_ENABLE_(\w+)", f.read())
        self.assertIn("TESTS", options)
        for opt in options:
            if opt == "TESTS":
                continue  # follows Spack's run_tests, checked below
            self.assertIn(opt.lower(), self.variant_names(), f"HPCTRAIN_ENABLE_{opt}")

    def test_cmake_args_follow_variants_and_run_tests(self):
        with tempfile.TemporaryDirectory() as tmp:
            on = make_pkg(self.Hpctrain, tmp, cuda=True, run_tests=True).cmake_args()
            off = make_pkg(
                self.Hpctrain, tmp, ucx=False, benchmarks=False, onednn=False, libxsmm=False
            ).cmake_args()
            xsmm = make_pkg(self.Hpctrain, tmp).cmake_args()
        self.assertIn("-DHPCTRAIN_ENABLE_LIBXSMM:BOOL=ON", xsmm)
        self.assertIn("-DHPCTRAIN_ENABLE_LIBXSMM:BOOL=OFF", off)
        for name in ("TESTS", "BENCHMARKS", "UCX", "ONEDNN", "CUDA"):
            self.assertIn(f"-DHPCTRAIN_ENABLE_{name}:BOOL=ON", on)
            self.assertIn(f"-DHPCTRAIN_ENABLE_{name}:BOOL=OFF", off)
        self.assertIn("-DHPCTRAIN_WARNINGS_AS_ERRORS:BOOL=OFF", off)
        self.assertIn("-DMPI_CXX_COMPILER:STRING=/w/mpicxx", off)
        self.assertIn("-DHPCTRAIN_ENABLE_MPI:BOOL=ON", on)

    def test_without_mpi(self):
        with tempfile.TemporaryDirectory() as tmp:
            args = make_pkg(
                self.Hpctrain, tmp, with_mpi=False, ucx=False, benchmarks=False, run_tests=True
            ).cmake_args()
        self.assertIn("-DHPCTRAIN_ENABLE_MPI:BOOL=OFF", args)
        self.assertFalse(any("MPI_C" in a or "MPIEXEC" in a for a in args), args)

    def test_cuda_uses_kokkos_compiler(self):
        with tempfile.TemporaryDirectory() as tmp:
            cuda = make_pkg(self.Hpctrain, tmp, cuda=True).cmake_args()
            host = make_pkg(self.Hpctrain, tmp).cmake_args()
        wrapper = "-DCMAKE_CXX_COMPILER:STRING=/opt/kokkos-nvcc-wrapper/bin/nvcc_wrapper"
        self.assertIn(wrapper, cuda)
        self.assertFalse(any(a.startswith("-DCMAKE_CXX_COMPILER") for a in host))

    def test_mpi_launcher_for_tests(self):
        with tempfile.TemporaryDirectory() as tmp:
            ompi = make_pkg(self.Hpctrain, tmp, run_tests=True).cmake_args()
            mpich = make_pkg(self.Hpctrain, tmp, run_tests=True, mpi="mpich").cmake_args()
            plain = make_pkg(self.Hpctrain, tmp).cmake_args()
            launcher = os.path.join(tmp, "mpich", "bin", "mpiexec")
        self.assertIn(f"-DMPIEXEC_EXECUTABLE:STRING={launcher}", mpich)
        self.assertIn("-DHPCTRAIN_MPIEXEC_FLAGS:STRING=", mpich)
        self.assertFalse(any("HPCTRAIN_MPIEXEC_FLAGS" in a for a in ompi))
        self.assertFalse(any("MPIEXEC" in a for a in plain))

    # ---- CMake dependencies <-> depends_on -------------------------------------------------
    def test_every_cmake_dependency_is_declared(self):
        found = set()
        for path in cmake_sources():
            with open(path) as f:
                text = f.read()
            found |= set(re.findall(r"find_package\(\s*(\w+)", text))
            for modules in re.findall(r"pkg_check_modules\(([^)]*)\)", text):
                words = modules.split()[1:]
                found |= {w for w in words if w.isidentifier() and not w.isupper()}
        unknown = found - CMAKE_TO_SPACK.keys()
        self.assertFalse(unknown, f"add these CMake dependencies to CMAKE_TO_SPACK: {unknown}")
        for cmake_name in found:
            spack_name = CMAKE_TO_SPACK[cmake_name]
            if spack_name:
                self.assertIn(spack_name, self.dep_names(), f"{cmake_name} -> {spack_name}")

    def test_dependency_details(self):
        deps = self.deps()

        def has(spec, dtype=None, cond=None):
            for s, t, c in deps:
                t = (t,) if isinstance(t, str) else tuple(t)
                if s == spec and (dtype is None or t == dtype) and (cond is None or cond in c):
                    return True
            return False

        self.assertTrue(has("c", ("build",)))
        self.assertTrue(has("cxx", ("build",)))
        self.assertTrue(has("cmake@3.25:", ("build",)))
        self.assertTrue(has("pkgconfig", ("build",)))
        self.assertTrue(has("hdf5@1.10:+mpi"))
        self.assertTrue(has("kokkos@3.4:4"))
        self.assertTrue(has("kokkos-kernels@3.4:4 +blas"))
        # kokkos and kokkos-kernels are tied to the same release, every release in the range
        for release in ("3.4", "3.7", "4.0", "4.3", "4.7"):
            self.assertTrue(has(f"kokkos-kernels@{release}", cond=f"^kokkos@{release}"), release)
        self.assertTrue(has("ucx@1.12:", cond="+ucx"))
        self.assertTrue(has("onednn@2.6:", cond="+onednn"))
        self.assertTrue(has("libxsmm@1.17:", cond="+libxsmm ~cuda"))
        self.assertTrue(has("benchmark", cond="+benchmarks"))
        self.assertTrue(has("googletest", ("test",)))
        self.assertTrue(has("simgrid@3.32:", ("test",)))  # the smpi tests (smpicxx)
        self.assertTrue(has("python@3:", ("test",), cond="+benchmarks"))
        self.assertTrue(has("kokkos+openmp", cond="+openmp"))
        self.assertTrue(has("kokkos+cuda+cuda_lambda+wrapper", cond="+cuda"))
        self.assertTrue(has("kokkos-kernels+cuda+cublas", cond="+cuda"))

    def test_cuda_arch_propagates_to_kokkos(self):
        for arch in CudaPackage.cuda_arch_values:
            for dep in ("kokkos", "kokkos-kernels"):
                matches = [c for s, _, c in self.deps() if s == f"{dep} cuda_arch={arch}"]
                self.assertEqual(len(matches), 1, f"{dep} cuda_arch={arch}")
                self.assertIn("+cuda", matches[0])
                self.assertIn(f"cuda_arch={arch}", matches[0])
        conflicts = [(a[0], k.get("when")) for a, k, _ in self.directives("conflicts")]
        self.assertIn(("+cuda", "cuda_arch=none"), conflicts)

    # ---- tests run by Spack ----------------------------------------------------------------
    def test_check_and_install_time_mpi_tests(self):
        with tempfile.TemporaryDirectory() as tmp:
            pkg = make_pkg(self.Hpctrain, tmp, run_tests=True)
            fake.Executable.CALLS.clear()
            pkg.check()
            pkg.check_mpi()
        ctest = os.path.join("/opt/cmake", "bin", "ctest")
        unit, mpi = fake.Executable.CALLS
        self.assertEqual(unit[0], ctest)
        self.assertEqual(unit[-2:], ("-L", "unit"))
        self.assertEqual(mpi[0], ctest)
        self.assertIn("mpi", mpi)
        self.assertEqual(self.Hpctrain.check_mpi.run_after, "install")
        self.assertEqual(self.Hpctrain.check_mpi.on_package_attributes, {"run_tests": True})


class EnvironmentTest(unittest.TestCase):
    ENVS = os.path.join(SPACK_DIR, "environments")

    def load(self, name):
        path = os.path.join(self.ENVS, name, "spack.yaml")
        with open(path) as f:
            return path, yaml.safe_load(f)["spack"]

    def test_all_environments_parse_and_point_at_the_repo(self):
        names = sorted(os.listdir(self.ENVS))
        self.assertIn("debian12-workstation", names)
        self.assertIn("gpu-cluster-example", names)
        for name in names:
            path, env = self.load(name)
            here = os.path.dirname(path)
            repo = os.path.normpath(os.path.join(here, env["repos"]["hpctrain"]))
            self.assertTrue(os.path.isfile(os.path.join(repo, "repo.yaml")), name)
            self.assertTrue(any(s.startswith("hpctrain") for s in env["specs"]), name)
            self.assertIs(env["concretizer"]["unify"], True)

    def test_workstation_uses_system_packages_only(self):
        path, env = self.load("debian12-workstation")
        develop = env["develop"]["hpctrain"]
        checkout = os.path.normpath(os.path.join(os.path.dirname(path), develop["path"]))
        with open(os.path.join(checkout, "CMakeLists.txt")) as f:
            self.assertRegex(f.read(), r"project\(\s*hpctrain\b")
        packages = env["packages"]
        for name, settings in packages.items():
            self.assertIs(settings.get("buildable"), False, name)
            for ext in settings.get("externals", []):
                self.assertTrue(ext["spec"].startswith(name + "@"), ext["spec"])
        # Every dependency of the recipe resolves to a system package here, except those of a
        # variant the environment's spec turns off (~nccl: NCCL is no Debian package).
        (spec,) = env["specs"]
        off = {f"+{v}" for v in re.findall(r"~(\w+)", spec)}
        _, records = load_recipe()
        direct = {
            re.match(r"[\w-]+", a[0]).group(0)
            for n, a, k, w in records
            if n == "depends_on" and k.get("when") not in off
        }
        direct -= {"c", "cxx"}  # the gcc external provides both
        for dep in direct:
            self.assertIn(dep, packages, f"{dep} has no system package in the environment")


if __name__ == "__main__":
    unittest.main(verbosity=2)
