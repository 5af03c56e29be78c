# What `cmake --install` puts where (docs/install.md). Components:
#   daemon  torchmond, torchmonctl, the configuration, the systemd unit,
#           sysusers.d and tmpfiles.d entries, the docs
#   dev     the C++ client: headers, static libraries, the CMake package
#           (find_package(torchmon CONFIG) -> torchmon::client) and torchmon.pc
#   python  the torchmon package for Python3_EXECUTABLE (client/python)
#   loadgen torchmon-loadgen, only on request (EXCLUDE_FROM_ALL)
# Nothing here needs a test target: TORCHMON_BUILD_TESTS=OFF installs the same.

include(CMakePackageConfigHelpers)

set(TORCHMON_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/torchmon)

# --- dev ---------------------------------------------------------------------
install(TARGETS torchmon_client torchmon_proto EXPORT torchmonTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The client's headers, the protocol conventions they include, and the
# generated torchmon.v1 messages and stubs (a Query client needs them too).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/include/torchmon
                  ${PROJECT_SOURCE_DIR}/proto/include/torchmon
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
        FILES_MATCHING PATTERN "*.h")
install(DIRECTORY ${PROJECT_BINARY_DIR}/proto/gen/torchmon/v1
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/torchmon COMPONENT dev
        FILES_MATCHING PATTERN "*.pb.h")
# The .proto beside its generated headers, as Debian's libprotobuf-dev keeps
# google/protobuf/*.proto: `protoc -I <prefix>/include` finds it under the
# name it was compiled with (torchmon/v1/torchmon.proto), for other languages.
install(FILES ${PROJECT_SOURCE_DIR}/proto/torchmon/v1/torchmon.proto
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/torchmon/v1 COMPONENT dev)
install(EXPORT torchmonTargets NAMESPACE torchmon:: FILE torchmonTargets.cmake
        DESTINATION ${TORCHMON_CMAKE_PACKAGE_DIR} COMPONENT dev)

# The portable build's (deploy/release/build.sh, TORCHMON_PORTABLE) package
# finds nothing on the host: every dependency the two libraries link is one
# archive the tarball carries beside them, libtorchmon_bundled.a, and each
# imported target they name (protobuf::libprotobuf, gRPC::grpc++, absl::...)
# is that archive.
set(TORCHMON_CONFIG_IN torchmonConfig.cmake.in)
set(TORCHMON_PC_IN torchmon.pc.in)
if(TORCHMON_PORTABLE)
  set(TORCHMON_CONFIG_IN torchmonConfig-portable.cmake.in)
  set(TORCHMON_PC_IN torchmon-portable.pc.in)
  set(TORCHMON_BUNDLED_TARGETS "")
  foreach(target torchmon_client torchmon_proto)
    get_target_property(links ${target} LINK_LIBRARIES)
    foreach(link IN LISTS links)
      if(link MATCHES "::" AND NOT link MATCHES "^(torchmon|Threads)::")
        list(APPEND TORCHMON_BUNDLED_TARGETS ${link})
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES TORCHMON_BUNDLED_TARGETS)
  list(JOIN TORCHMON_BUNDLED_TARGETS " " TORCHMON_BUNDLED_TARGETS)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/${TORCHMON_CONFIG_IN}
  ${PROJECT_BINARY_DIR}/cmake/torchmonConfig.cmake
  INSTALL_DESTINATION ${TORCHMON_CMAKE_PACKAGE_DIR})
# SameMajorVersion: find_package(torchmon X.Y) accepts any installed X.Z with
# Z >= Y. While torchmon is 0.x that means any 0.Z from the requested one on,
# although a 0.x minor release may change the API; a project that needs one
# minor asks for a range, find_package(torchmon 0.1...<0.2), which this file
# honours (docs/install.md).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/torchmonConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/torchmonConfig.cmake
              ${PROJECT_BINARY_DIR}/cmake/torchmonConfigVersion.cmake
        DESTINATION ${TORCHMON_CMAKE_PACKAGE_DIR} COMPONENT dev)

# torchmon.pc, relocatable: the prefix is found from the file's own place.
file(RELATIVE_PATH TORCHMON_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" TORCHMON_PC_TO_PREFIX "${TORCHMON_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/${TORCHMON_PC_IN} ${PROJECT_BINARY_DIR}/cmake/torchmon.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cmake/torchmon.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# --- daemon ------------------------------------------------------------------
# The binaries install from server/ and client/cli/.
# The docs an operator needs, the licence in Debian's copyright format and
# the changelog Debian policy asks for (gzip -9n: reproducible), in each
# package's doc directory.
#
# The project has no mail domain of its own; whoever publishes packages sets
# theirs (lintian reports bogus-mail-host until then: docs/install.md). The
# changelog names it; cmake/Packaging.cmake makes it the packages' maintainer.
set(TORCHMON_PACKAGE_CONTACT "the torchmon authors <torchmon@localhost>" CACHE STRING
    "Maintainer of the Debian packages (Name <address>)")
set(TORCHMON_VERSION ${PROJECT_VERSION})
configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/changelog.in
               ${PROJECT_BINARY_DIR}/debian/changelog.Debian @ONLY)
execute_process(COMMAND gzip -9nf ${PROJECT_BINARY_DIR}/debian/changelog.Debian
                COMMAND_ERROR_IS_FATAL ANY)
foreach(component_doc "daemon;torchmond" "dev;libtorchmon-dev")
  list(GET component_doc 0 component)
  list(GET component_doc 1 package)
  install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/copyright
                ${PROJECT_BINARY_DIR}/debian/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${package} COMPONENT ${component})
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/README.md
              ${PROJECT_SOURCE_DIR}/docs/install.md
              ${PROJECT_SOURCE_DIR}/docs/deploy.md
              ${PROJECT_SOURCE_DIR}/docs/operating.md
              ${PROJECT_SOURCE_DIR}/docs/security.md
              ${PROJECT_SOURCE_DIR}/docs/metrics.md
              ${PROJECT_SOURCE_DIR}/docs/cli.md
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/torchmond COMPONENT daemon)

# The portable build links gRPC, OpenSSL and the rest into its binaries and
# libraries: their licences go with them (deploy/release/deps.sh collects
# each one's licence files and Debian copyright), in the doc directory of
# each component that carries them.
set(TORCHMON_BUNDLED_LICENSES "" CACHE PATH
    "The portable build's bundled libraries' licences (deploy/release/configure.sh)")
set(TORCHMON_CLIENT_BUNDLED_LICENSES "" CACHE PATH
    "Those of them the C++ client library links (deploy/release/configure.sh)")
if(TORCHMON_BUNDLED_LICENSES)
  install(DIRECTORY ${TORCHMON_CLIENT_BUNDLED_LICENSES}/
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/libtorchmon-dev/bundled COMPONENT dev)
  if(TORCHMON_BUILD_SERVER)
    install(DIRECTORY ${TORCHMON_BUNDLED_LICENSES}/
            DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/torchmond/bundled COMPONENT daemon)
  endif()
endif()

# The rest depends on the prefix chosen at install time (`--prefix`, or
# CPack's /usr), so a script run by `cmake --install` places it: with prefix
# /usr the configuration goes to /etc and the unit to /lib/systemd/system, as
# Debian has them; otherwise everything stays under the prefix
# (<prefix>/etc, <prefix>/lib/systemd/system), but for GNUInstallDirs' other
# SYSCONFDIR rules (/etc/opt/<name> for the prefix /opt/<name>; an absolute
# CMAKE_INSTALL_SYSCONFDIR as given).
# The unit, its configuration and the system user are torchmond's. The unit
# goes to TORCHMON_SYSTEMD_UNIT_DIR if set and the prefix is /usr (the
# portable build's packages: /usr/lib/systemd/system, which RHEL and Debian
# alike search; its tarball, another prefix, keeps <prefix>/lib/systemd).
set(TORCHMON_SYSTEMD_UNIT_DIR "" CACHE PATH "Where the systemd unit installs (default: by the prefix)")
if(TORCHMON_BUILD_SERVER)
  install(CODE "
  set(TORCHMON_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(TORCHMON_BINARY_DIR \"${PROJECT_BINARY_DIR}\")
  set(TORCHMON_INSTALL_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(TORCHMON_INSTALL_SYSCONFDIR \"${CMAKE_INSTALL_SYSCONFDIR}\")
  set(TORCHMON_INSTALL_DATAROOTDIR \"${CMAKE_INSTALL_DATAROOTDIR}\")
  set(TORCHMON_SYSTEMD_UNIT_DIR \"${TORCHMON_SYSTEMD_UNIT_DIR}\")
" COMPONENT daemon)
  install(SCRIPT ${PROJECT_SOURCE_DIR}/cmake/InstallDaemonFiles.cmake COMPONENT daemon)
endif()
