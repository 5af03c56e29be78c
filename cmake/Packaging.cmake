# `cpack -G DEB` from a build directory: two Debian packages (docs/install.md).
#   torchmond        component daemon: torchmond, torchmonctl, the unit,
#                    sysusers.d and tmpfiles.d entries, /etc/torchmon/torchmond.conf
#                    (a conffile), the docs
#   libtorchmon-dev  component dev: headers, static libraries, CMake package, torchmon.pc
# Installed under /usr whatever CMAKE_INSTALL_PREFIX the build has; the
# daemon's dependencies come from dpkg-shlibdeps.

set(CPACK_PACKAGE_NAME torchmon)
set(CPACK_PACKAGE_VENDOR "the torchmon authors")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# Debian revision 1: <version>-1, a non-native package with changelog.Debian.gz.
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
# Symbols out of the binaries, as Debian ships them (dh_strip).
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_CONTACT "${TORCHMON_PACKAGE_CONTACT}")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Stage with DESTDIR, so that the absolute /etc and /lib/systemd paths of
# cmake/InstallDaemonFiles.cmake land inside the package.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_COMPONENTS_ALL daemon dev)
set(CPACK_DEB_COMPONENT_INSTALL ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Runtime dependencies from what the ELF files link (dpkg-shlibdeps): the
# daemon's libraries; libtorchmon-dev has only static archives, which
# dpkg-shlibdeps does not look at, so its Depends are spelled out below.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)

set(CPACK_DEBIAN_DAEMON_PACKAGE_NAME torchmond)
set(CPACK_DEBIAN_DAEMON_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_DAEMON_PACKAGE_SUGGESTS "prometheus")
set(CPACK_COMPONENT_DAEMON_DESCRIPTION
"torch.monitor stats out of process: the torchmond daemon
torchmond runs beside GPU training jobs. Training processes send stat
samples and events to it over gRPC with the torchmon client (Python or
C++); it aggregates them in fixed windows (value, mean, count, sum, max,
min, quantiles) with max_samples caps and exact accounting, serves the
results to Prometheus scrapes and answers window-summary queries.
This package holds torchmond, the torchmonctl command-line client, a
hardened systemd unit (not enabled on install), the torchmon system user
and /etc/torchmon/torchmond.conf.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libtorchmon-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# Static libraries: what links them is what their users need.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libgrpc++-dev (>= 1.51), libprotobuf-dev, libabsl-dev")
set(CPACK_COMPONENT_DEV_DESCRIPTION
"torch.monitor stats out of process: C++ client library (development files)
The torchmon C++ client records stats and events in a training process and
streams them to the torchmond daemon without blocking the caller.
This package holds the headers, the static libraries, the CMake package
(find_package(torchmon CONFIG) gives torchmon::client) and torchmon.pc.")

# Maintainer scripts and the conffiles list; CPack wants them under these names.
set(debian_control_dir ${PROJECT_BINARY_DIR}/debian/torchmond)
foreach(name postinst prerm postrm conffiles)
  configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/torchmond.${name}
                 ${debian_control_dir}/${name} COPYONLY)
endforeach()
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_EXTRA
  ${debian_control_dir}/postinst ${debian_control_dir}/prerm ${debian_control_dir}/postrm
  ${debian_control_dir}/conffiles)
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# The portable build (deploy/release/build.sh, TORCHMON_PORTABLE): only
# torchmond, which links everything but glibc, so the .deb depends on libc6
# and on passwd (the postinst's groupadd and useradd) and installs on every
# Debian and Ubuntu release from glibc 2.28 on; an RPM of the same files for
# the RHEL family. libtorchmon-dev stays the Debian-linked build's.
if(TORCHMON_PORTABLE)
  set(CPACK_COMPONENTS_ALL daemon)
  # The architecture the toolchain compiles for (deploy/release/arch.sh:
  # aarch64 is cross-compiled on x86_64), not the build machine's, which
  # dpkg and rpmbuild would otherwise name.
  if(CMAKE_SYSTEM_PROCESSOR STREQUAL "aarch64")
    set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE arm64)
    set(CPACK_RPM_PACKAGE_ARCHITECTURE aarch64)
  elseif(CMAKE_SYSTEM_PROCESSOR STREQUAL "x86_64")
    set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE amd64)
    set(CPACK_RPM_PACKAGE_ARCHITECTURE x86_64)
  else()
    message(FATAL_ERROR "TORCHMON_PORTABLE builds x86_64 or aarch64, not ${CMAKE_SYSTEM_PROCESSOR}")
  endif()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_DAEMON_PACKAGE_DEPENDS "libc6 (>= ${TORCHMON_GLIBC_FLOOR}), passwd")

  set(CPACK_RPM_COMPONENT_INSTALL ON)
  set(CPACK_RPM_FILE_NAME RPM-DEFAULT)
  set(CPACK_RPM_PACKAGE_RELEASE 1)
  set(CPACK_RPM_PACKAGE_RELOCATABLE OFF)
  set(CPACK_RPM_PACKAGE_LICENSE "BSD-3-Clause")
  set(CPACK_RPM_PACKAGE_URL "https://github.com/torchmon/torchmon")
  set(CPACK_RPM_DAEMON_PACKAGE_NAME torchmond)
  set(CPACK_RPM_DAEMON_PACKAGE_GROUP "System Environment/Daemons")
  set(CPACK_RPM_DAEMON_PACKAGE_SUMMARY "torch.monitor stats out of process: the torchmond daemon")
  # Requires as written, nothing found by rpmbuild's scan (which would add
  # the build machine's glibc version) and no Provides of bundled libraries.
  set(CPACK_RPM_PACKAGE_AUTOREQPROV OFF)
  set(CPACK_RPM_DAEMON_PACKAGE_REQUIRES "glibc >= ${TORCHMON_GLIBC_FLOOR}, systemd")
  set(CPACK_RPM_DAEMON_POST_INSTALL_SCRIPT_FILE ${PROJECT_SOURCE_DIR}/deploy/rpm/torchmond.post)
  set(CPACK_RPM_DAEMON_PRE_UNINSTALL_SCRIPT_FILE ${PROJECT_SOURCE_DIR}/deploy/rpm/torchmond.preun)
  set(CPACK_RPM_DAEMON_POST_UNINSTALL_SCRIPT_FILE ${PROJECT_SOURCE_DIR}/deploy/rpm/torchmond.postun)
  set(CPACK_RPM_DAEMON_USER_FILELIST "%config(noreplace) /etc/torchmon/torchmond.conf")
  # Directories the system's own packages own (filesystem, systemd).
  set(CPACK_RPM_EXCLUDE_FROM_AUTO_FILELIST_ADDITION
    /usr/lib/systemd /usr/lib/systemd/system /usr/lib/sysusers.d /usr/lib/tmpfiles.d)
endif()

include(CPack)
