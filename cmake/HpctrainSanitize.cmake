# Sanitizer and fuzzing builds (docs/testing.md, scripts/sanitize.sh).
#
#   -DHPCTRAIN_SANITIZE="address;undefined"   ASan + UBSan on every hpctrain target
#   -DHPCTRAIN_SANITIZE=thread                TSan
#   -DHPCTRAIN_FUZZ=ON                        libFuzzer coverage on every target and the fuzz
#                                             targets of tests/fuzz (clang only; combine with
#                                             address;undefined)
#
# The flags go on everything this project compiles and links (add_compile_options before the
# parts are added), never on the prebuilt Debian libraries (Open MPI, HDF5, Kokkos, GoogleTest),
# which therefore stay uninstrumented: ASan and UBSan see our code, TSan sees our threads'
# accesses. UBSan stops at the first finding (-fno-sanitize-recover), so a finding fails the test.
set(HPCTRAIN_SANITIZE "" CACHE STRING
    "Sanitizers for a checking build: 'address;undefined' or 'thread' (empty: none)")
option(HPCTRAIN_FUZZ "Build the libFuzzer targets of tests/fuzz (clang; coverage on every target)" OFF)

if(HPCTRAIN_SANITIZE)
  set(_allowed address undefined thread)
  foreach(s IN LISTS HPCTRAIN_SANITIZE)
    if(NOT s IN_LIST _allowed)
      message(FATAL_ERROR "HPCTRAIN_SANITIZE: '${s}' is not one of address, undefined, thread")
    endif()
  endforeach()
  if("thread" IN_LIST HPCTRAIN_SANITIZE AND "address" IN_LIST HPCTRAIN_SANITIZE)
    message(FATAL_ERROR "HPCTRAIN_SANITIZE: thread and address cannot be combined")
  endif()
  list(JOIN HPCTRAIN_SANITIZE "," _hpctrain_sanitizers)
  add_compile_options(-fsanitize=${_hpctrain_sanitizers} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_hpctrain_sanitizers})
  message(STATUS "Sanitizers: ${_hpctrain_sanitizers}")
endif()

if(HPCTRAIN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "HPCTRAIN_FUZZ needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  # Coverage feedback from the libraries too (the parsers live there); the libFuzzer runtime
  # itself is linked into the fuzz targets only (tests/fuzz/CMakeLists.txt).
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

# HPCTRAIN_CHECK_TARGETS: the targets a checking build's checks run (scripts/sanitize.sh sets
# it), gathered under one target, hpctrain_check_set, once every part has been added. With the
# Makefile generator `cmake --build --target A B C` builds A, then B, then C, each to its link,
# so a one-file test or a link kept the second core idle; one target lets make schedule all of
# their objects at once.
set(HPCTRAIN_CHECK_TARGETS "" CACHE STRING
    "Targets built together by the target hpctrain_check_set (checking builds)")
function(_hpctrain_add_check_set)
  add_custom_target(hpctrain_check_set)
  foreach(t IN LISTS HPCTRAIN_CHECK_TARGETS)
    if(NOT TARGET ${t})
      message(FATAL_ERROR "HPCTRAIN_CHECK_TARGETS: '${t}' is not a target of this configuration")
    endif()
    add_dependencies(hpctrain_check_set ${t})
  endforeach()
endfunction()
if(HPCTRAIN_CHECK_TARGETS)
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL _hpctrain_add_check_set)
endif()
