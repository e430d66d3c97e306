// A cluster certificate authority: `migrator credentials init` creates one,
// `migrator credentials issue HOST` signs a host's certificate with it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ferry::tls {

// Creates DIR/ca.pem and DIR/ca-key.pem (ECDSA P-256, ten years); refuses to
// replace an existing CA.
void init_authority(const std::filesystem::path& dir);

struct host_request {
    std::string name;                   // the common name: the host's identity
    std::vector<std::string> addresses; // IPv4/IPv6 addresses it is dialled at
    std::vector<std::string> dns_names;
};

// Signs a certificate for `host` (for TLS server and client use, two years)
// with the CA in `ca_dir`, and writes ca.pem, cert.pem and key.pem into
// `out_dir`: a host's whole credentials directory. A name that is an IP
// address is also put in the addresses.
void issue_host(const std::filesystem::path& ca_dir, host_request host,
                const std::filesystem::path& out_dir);

} // namespace ferry::tls
