# Defines one interface target, hpctrain::kokkos, carrying Kokkos and, when gemm goes through
# KokkosBlas, Kokkos Kernels.
#
# HPCTRAIN_GEMM_VENDOR picks the BLAS behind core::gemm at configure time:
#  * kokkos-kernels (default without CUDA): KokkosBlas::gemm (OpenBLAS on the host, its cuBLAS
#    TPL in a CUDA build); needs Kokkos Kernels and a BLAS;
#  * cublas (default with HPCTRAIN_ENABLE_CUDA=ON): cublasSgemm/cublasDgemm called directly
#    (src/core/gemm_cublas.cpp); needs the CUDA toolkit only, no Kokkos Kernels, no host BLAS.
#
# Works with two kinds of installs:
#  * a standard Kokkos 3.4+/4.x CMake install (Spack, source builds): Kokkos::kokkos and
#    Kokkos::kokkoskernels are used as they are;
#  * Debian's TriBITS-built Kokkos 3.4.01 (libtrilinos-kokkos-dev), whose Kokkos::kokkos points
#    at a non-existent include directory and which has no Kokkos::kokkoskernels target: the
#    target is then assembled from Kokkos_INCLUDE_DIRS / KokkosKernels_LIBRARIES.
if(HPCTRAIN_ENABLE_CUDA)
  set(_hpctrain_gemm_vendor_default cublas)
else()
  set(_hpctrain_gemm_vendor_default kokkos-kernels)
endif()
set(HPCTRAIN_GEMM_VENDOR ${_hpctrain_gemm_vendor_default} CACHE STRING
    "The BLAS behind core::gemm: kokkos-kernels (KokkosBlas) or cublas (CUDA builds)")
set_property(CACHE HPCTRAIN_GEMM_VENDOR PROPERTY STRINGS kokkos-kernels cublas)
if(NOT HPCTRAIN_GEMM_VENDOR MATCHES "^(kokkos-kernels|cublas)$")
  message(FATAL_ERROR "HPCTRAIN_GEMM_VENDOR='${HPCTRAIN_GEMM_VENDOR}': expected kokkos-kernels "
                      "or cublas")
endif()
if(HPCTRAIN_GEMM_VENDOR STREQUAL "cublas" AND NOT HPCTRAIN_ENABLE_CUDA)
  message(FATAL_ERROR "HPCTRAIN_GEMM_VENDOR=cublas needs HPCTRAIN_ENABLE_CUDA=ON (a Kokkos with "
                      "the CUDA backend); host builds use kokkos-kernels")
endif()
message(STATUS "hpctrain: gemm through ${HPCTRAIN_GEMM_VENDOR} (HPCTRAIN_GEMM_VENDOR)")

find_package(Kokkos 3.4 REQUIRED)
if(HPCTRAIN_GEMM_VENDOR STREQUAL "kokkos-kernels")
  find_package(KokkosKernels REQUIRED)
endif()

add_library(hpctrain_kokkos INTERFACE)
add_library(hpctrain::kokkos ALIAS hpctrain_kokkos)

set(_hpctrain_kokkos_standard FALSE)
if(TARGET Kokkos::kokkos)
  get_target_property(_kk_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  set(_hpctrain_kokkos_standard TRUE)
  if(_kk_inc)
    foreach(_d IN LISTS _kk_inc)
      if(NOT _d MATCHES "^\\$<" AND NOT EXISTS "${_d}")
        set(_hpctrain_kokkos_standard FALSE)   # Debian's broken TriBITS target
      endif()
    endforeach()
  endif()
endif()

if(_hpctrain_kokkos_standard AND HPCTRAIN_GEMM_VENDOR STREQUAL "cublas")
  message(STATUS "hpctrain: using the Kokkos::kokkos target (no Kokkos Kernels)")
  target_link_libraries(hpctrain_kokkos INTERFACE Kokkos::kokkos)
elseif(_hpctrain_kokkos_standard AND TARGET Kokkos::kokkoskernels)
  message(STATUS "hpctrain: using Kokkos::kokkos and Kokkos::kokkoskernels targets")
  target_link_libraries(hpctrain_kokkos INTERFACE Kokkos::kokkoskernels Kokkos::kokkos)
else()
  message(STATUS "hpctrain: assembling Kokkos from TriBITS variables (${Kokkos_INCLUDE_DIRS})")
  set(_kk_libs)
  set(_kk_kernels_libs)
  if(HPCTRAIN_GEMM_VENDOR STREQUAL "kokkos-kernels")
    set(_kk_kernels_libs ${KokkosKernels_LIBRARIES})
  endif()
  foreach(_lib IN LISTS _kk_kernels_libs Kokkos_LIBRARIES)
    if(TARGET ${_lib})
      list(APPEND _kk_libs ${_lib})
    else()
      find_library(_found_${_lib} NAMES ${_lib}
                   HINTS ${KokkosKernels_LIBRARY_DIRS} ${Kokkos_LIBRARY_DIRS} REQUIRED)
      list(APPEND _kk_libs ${_found_${_lib}})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _kk_libs)
  target_include_directories(hpctrain_kokkos SYSTEM INTERFACE
    ${KokkosKernels_INCLUDE_DIRS} ${Kokkos_INCLUDE_DIRS})
  target_link_libraries(hpctrain_kokkos INTERFACE ${_kk_libs} ${CMAKE_DL_LIBS})
endif()

if(HPCTRAIN_ENABLE_CUDA)
  if(NOT Kokkos_ENABLE_CUDA)
    message(FATAL_ERROR "HPCTRAIN_ENABLE_CUDA=ON but the Kokkos found (${Kokkos_DIR}) has no "
                        "CUDA backend; build Kokkos with -DKokkos_ENABLE_CUDA=ON")
  endif()
  target_compile_definitions(hpctrain_kokkos INTERFACE HPCTRAIN_ENABLE_CUDA=1)
  # oneDNN's primitives read and write host memory; in a CUDA build the tensors are device
  # memory, so gemm, the convolutions and the element-wise kernels keep to their Kokkos and
  # cuBLAS paths. Normal variable: it shadows the option's cache entry for this configure.
  if(HPCTRAIN_ENABLE_ONEDNN)
    if(HPCTRAIN_ONEDNN_REQUESTED)
      message(WARNING "HPCTRAIN_ENABLE_ONEDNN=ON ignored: oneDNN is host-only and "
                      "HPCTRAIN_ENABLE_CUDA=ON keeps tensors in device memory")
    else()
      message(STATUS "hpctrain: oneDNN off in a CUDA build (host-only; tensors are device memory)")
    endif()
    set(HPCTRAIN_ENABLE_ONEDNN OFF)
  endif()
endif()

# hpctrain_host_only_sources(<file>...): with Kokkos's nvcc_wrapper as the C++ compiler (CUDA
# builds), these files skip nvcc's CUDA front end and go straight to the host compiler. For host
# code that front end cannot parse (generated protobuf code, GCC vector builtins); no effect in
# other builds, so their bits stay those of the host compiler everywhere.
function(hpctrain_host_only_sources)
  if(CMAKE_CXX_COMPILER MATCHES "nvcc_wrapper$")
    set_property(SOURCE ${ARGN} APPEND PROPERTY COMPILE_OPTIONS --host-only)
  endif()
endfunction()
