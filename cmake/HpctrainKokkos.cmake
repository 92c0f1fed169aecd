# Defines one interface target, hpctrain::kokkos, carrying Kokkos and Kokkos Kernels.
#
# Works with two kinds of installs:
#  * a standard Kokkos 3.4+/4.x CMake install (Spack, source builds): Kokkos::kokkos and
#    Kokkos::kokkoskernels are used as they are;
#  * Debian's TriBITS-built Kokkos 3.4.01 (libtrilinos-kokkos-dev), whose Kokkos::kokkos points
#    at a non-existent include directory and which has no Kokkos::kokkoskernels target: the
#    target is then assembled from Kokkos_INCLUDE_DIRS / KokkosKernels_LIBRARIES.
find_package(Kokkos 3.4 REQUIRED)
find_package(KokkosKernels REQUIRED)

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

if(_hpctrain_kokkos_standard AND TARGET Kokkos::kokkoskernels)
  message(STATUS "hpctrain: using Kokkos::kokkos and Kokkos::kokkoskernels targets")
  target_link_libraries(hpctrain_kokkos INTERFACE Kokkos::kokkoskernels Kokkos::kokkos)
else()
  message(STATUS "hpctrain: assembling Kokkos from TriBITS variables (${Kokkos_INCLUDE_DIRS})")
  set(_kk_libs)
  foreach(_lib IN LISTS KokkosKernels_LIBRARIES Kokkos_LIBRARIES)
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
endif()
