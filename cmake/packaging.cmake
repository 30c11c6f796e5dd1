# Debian packages (cpack -G DEB, tensorwire issue 15), one per install
# component:
#   libtensorwire0          lib      the shared library
#   libtensorwire-dev       dev      header, CMake package, pkg-config file
#   tensorwire-conformance  conform  runner, adapters, wire fuzzer, probe,
#                                    profiles, spec and docs
# Depends come from dpkg-shlibdeps for the system libraries each package's
# programs load, plus the exact library version for the two that use it.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tensorwire)
set(CPACK_PACKAGE_VENDOR "tensorwire")
set(CPACK_PACKAGE_CONTACT "tensorwire developers <tensorwire@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# no package-wide summary: each component's description starts with its own
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL lib dev conform)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# the programs of tensorwire-conformance load libtensorwire.so.0 from the
# lib package: dpkg-shlibdeps finds it in that package's staging tree
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
    ${CMAKE_BINARY_DIR}/_CPack_Packages/Linux/DEB/${CPACK_PACKAGE_NAME}-${PROJECT_VERSION}-Linux/lib${CPACK_PACKAGING_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR})
set(_tw_lib_dep "libtensorwire0 (= ${PROJECT_VERSION}-1)")

set(CPACK_DEBIAN_LIB_PACKAGE_NAME libtensorwire0)
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_LIB_DESCRIPTION
    "TensorPipe-compatible tensor pipes (shared library)\nlibtensorwire speaks stock TensorPipe's wire protocol over TCP, shared\nmemory and RDMA verbs, with the basic, mpt, cma, xth and CUDA channels.")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libtensorwire-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${_tw_lib_dep}")
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "TensorPipe-compatible tensor pipes (development files)\nThe header, find_package(tensorwire CONFIG) files and tensorwire.pc.")
set(CPACK_DEBIAN_CONFORM_PACKAGE_NAME tensorwire-conformance)
set(CPACK_DEBIAN_CONFORM_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_CONFORM_PACKAGE_DEPENDS "${_tw_lib_dep}")
set(CPACK_COMPONENT_CONFORM_DESCRIPTION
    "conformance harness for TensorPipe wire protocol implementations\ntensorwire-conform runs the wire, semantic and interop suites against any\nimplementation through an adapter (spec/agent.md); with the adapters for\nlibtensorwire and stock TensorPipe, their profiles, the spec and the\nblack-box wire fuzzer.")
include(CPack)
