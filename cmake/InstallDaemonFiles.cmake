# Run by `cmake --install` (component daemon; cmake/Install.cmake sets the
# TORCHMON_* variables first): installs the files whose place or content
# depends on the prefix chosen at install time. DESTDIR is honoured (CPack
# stages the Debian package with it).
#
#   prefix /usr (the Debian package)      any other prefix P
#   /etc/torchmon/torchmond.conf          P/etc/torchmon/torchmond.conf
#   /lib/systemd/system/torchmond.service P/lib/systemd/system/torchmond.service
#   /usr/lib/sysusers.d/torchmon.conf     P/lib/sysusers.d/torchmon.conf
#   /usr/lib/tmpfiles.d/torchmon.conf     P/lib/tmpfiles.d/torchmon.conf
#
# The unit's ExecStart names P/bin/torchmond and the configuration above.

set(prefix "${CMAKE_INSTALL_PREFIX}")
if(prefix STREQUAL "/usr")
  set(etc_dir "/etc")
  set(unit_dir "/lib/systemd/system")
else()
  set(etc_dir "${prefix}/etc")
  set(unit_dir "${prefix}/lib/systemd/system")
endif()
set(TORCHMOND "${prefix}/${TORCHMON_INSTALL_BINDIR}/torchmond")
set(TORCHMOND_CONF "${etc_dir}/torchmon/torchmond.conf")

set(staging "${TORCHMON_BINARY_DIR}/install-staging")
file(MAKE_DIRECTORY "${staging}")
configure_file("${TORCHMON_SOURCE_DIR}/deploy/systemd/torchmond.service" "${staging}/torchmond.service"
               @ONLY)
file(INSTALL "${TORCHMON_SOURCE_DIR}/deploy/torchmond.conf" DESTINATION "${etc_dir}/torchmon"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
file(INSTALL "${staging}/torchmond.service" DESTINATION "${unit_dir}"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
file(INSTALL "${TORCHMON_SOURCE_DIR}/deploy/systemd/torchmon.sysusers" DESTINATION "${prefix}/lib/sysusers.d"
     RENAME torchmon.conf FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
file(INSTALL "${TORCHMON_SOURCE_DIR}/deploy/systemd/torchmon.tmpfiles" DESTINATION "${prefix}/lib/tmpfiles.d"
     RENAME torchmon.conf FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
