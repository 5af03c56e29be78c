"""Certificates for the TLS tests, made with the openssl command at test
time: EC P-256, valid two days, each key mode 0600 (the daemon refuses a
key other users may read)."""

import os
import subprocess

OPENSSL_CONFIG = """[req]
distinguished_name = dn
prompt = no
[dn]
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
[server_ext]
basicConstraints = critical,CA:FALSE
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1
[client_ext]
basicConstraints = critical,CA:FALSE
extendedKeyUsage = clientAuth
"""


def make_certificate(directory, name, extensions, issuer=None):
    """Makes directory/name.pem and name.key, with the extensions of the
    section `extensions` (ca_ext, server_ext for localhost and 127.0.0.1,
    client_ext), self-signed or signed by directory/issuer.pem; returns the
    two paths."""
    config = os.path.join(directory, "openssl.cnf")
    with open(config, "w") as f:
        f.write(OPENSSL_CONFIG)
    args = ["openssl", "req", "-x509", "-config", config, "-extensions", extensions,
            "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-subj", "/CN=" + name, "-keyout", os.path.join(directory, name + ".key"),
            "-out", os.path.join(directory, name + ".pem")]
    if issuer:
        args += ["-CA", os.path.join(directory, issuer + ".pem"),
                 "-CAkey", os.path.join(directory, issuer + ".key")]
    subprocess.run(args, check=True, capture_output=True, timeout=30)
    os.chmod(os.path.join(directory, name + ".key"), 0o600)
    return os.path.join(directory, name + ".pem"), os.path.join(directory, name + ".key")
