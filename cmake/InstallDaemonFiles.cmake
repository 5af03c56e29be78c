# Run by `cmake --install` (component daemon; cmake/Install.cmake sets the
# TORCHMON_* variables first): installs the files whose place or content
# depends on the prefix chosen at install time (`--prefix`, or CPack's /usr),
# which CMAKE_INSTALL_FULL_* cannot know: they are fixed when the build is
# configured. DESTDIR is honoured (CPack stages the Debian package with it).
#
#   prefix /usr (the Debian package)      any other prefix P
#   /etc/torchmon/torchmond.conf          P/etc/torchmon/torchmond.conf
#   /lib/systemd/system/torchmond.service P/lib/systemd/system/torchmond.service
#   /usr/lib/sysusers.d/torchmon.conf     P/lib/sysusers.d/torchmon.conf
#   /usr/lib/tmpfiles.d/torchmon.conf     P/lib/tmpfiles.d/torchmon.conf
#
# The configuration directory follows GNUInstallDirs' rule for SYSCONFDIR
# (/etc for the prefix /usr, /etc/opt/<name> for /opt/<name>, an absolute
# CMAKE_INSTALL_SYSCONFDIR as given). /lib/systemd/system is where Debian
# bookworm's systemd keeps packaged units; P/lib/systemd/system, sysusers.d
# and tmpfiles.d are searched by systemd for P = /usr/local too. The unit's
# ExecStart names P/<bindir>/torchmond and the configuration above.

set(prefix "${CMAKE_INSTALL_PREFIX}")

# GNUInstallDirs_get_absolute_install_dir's rules, applied to the prefix of
# this install rather than to the one the build was configured with.
function(torchmon_absolute_dir var dir)
  if(IS_ABSOLUTE "${dir}")
    set(${var} "${dir}" PARENT_SCOPE)
  else()
    set(${var} "${prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

function(torchmon_absolute_sysconf_dir var dir)
  if(IS_ABSOLUTE "${dir}")
    set(${var} "${dir}" PARENT_SCOPE)
  elseif(prefix STREQUAL "/usr")
    set(${var} "/${dir}" PARENT_SCOPE)
  elseif(prefix MATCHES "^/opt/")
    set(${var} "/${dir}${prefix}" PARENT_SCOPE)
  else()
    set(${var} "${prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

torchmon_absolute_dir(bin_dir "${TORCHMON_INSTALL_BINDIR}")
torchmon_absolute_dir(doc_dir "${TORCHMON_INSTALL_DATAROOTDIR}/doc/torchmond")
torchmon_absolute_sysconf_dir(etc_dir "${TORCHMON_INSTALL_SYSCONFDIR}")
if(TORCHMON_SYSTEMD_UNIT_DIR AND prefix STREQUAL "/usr")
  set(unit_dir "${TORCHMON_SYSTEMD_UNIT_DIR}")
elseif(prefix STREQUAL "/usr")
  set(unit_dir "/lib/systemd/system")
else()
  set(unit_dir "${prefix}/lib/systemd/system")
endif()

# What the unit template (deploy/systemd/torchmond.service) names.
set(TORCHMOND "${bin_dir}/torchmond")
set(TORCHMOND_CONF "${etc_dir}/torchmon/torchmond.conf")
set(TORCHMOND_DOC_DIR "${doc_dir}")

# One staging directory per destination, so that installs into different
# prefixes from the same build (the tests, CPack) never share a file.
string(MD5 destination "$ENV{DESTDIR}|${prefix}")
set(staging "${TORCHMON_BINARY_DIR}/install-staging/${destination}")
file(MAKE_DIRECTORY "${staging}")
configure_file("${TORCHMON_SOURCE_DIR}/deploy/systemd/torchmond.service" "${staging}/torchmond.service"
               @ONLY)

set(mode_0644 FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
file(INSTALL "${TORCHMON_SOURCE_DIR}/deploy/torchmond.conf" DESTINATION "${etc_dir}/torchmon"
     ${mode_0644})
file(INSTALL "${staging}/torchmond.service" DESTINATION "${unit_dir}" ${mode_0644})
file(INSTALL "${TORCHMON_SOURCE_DIR}/deploy/systemd/torchmon.sysusers"
     DESTINATION "${prefix}/lib/sysusers.d" RENAME torchmon.conf ${mode_0644})
file(INSTALL "${TORCHMON_SOURCE_DIR}/deploy/systemd/torchmon.tmpfiles"
     DESTINATION "${prefix}/lib/tmpfiles.d" RENAME torchmon.conf ${mode_0644})
