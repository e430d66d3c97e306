// TLS credentials for unit tests, made once per test process: a cluster CA
// and a certificate for 127.0.0.1, which both ends of a loopback connection
// present (a host talking to itself), and a second, unrelated CA.
#pragma once

#include "temp_dir.hpp"
#include "tls/authority.hpp"
#include "tls/credentials.hpp"

#include <string>

namespace ferry::test {

// A host `name` (an address) under the CA in `dir`/ca, written to dir/name.
inline ferry::tls::credentials_ptr issue_test_host(const std::filesystem::path& dir,
                                                   const std::string& name) {
    if (!std::filesystem::exists(dir / "ca" / ferry::tls::ca_file))
        ferry::tls::init_authority(dir / "ca");
    ferry::tls::issue_host(dir / "ca", {name, {}, {}}, dir / name);
    return ferry::tls::credentials::load(dir / name);
}

inline const ferry::tls::credentials_ptr& loopback_credentials() {
    static temp_dir dir("ferry-creds");
    static const auto creds = issue_test_host(dir.path, "127.0.0.1");
    return creds;
}

// Same name, another CA: what an outsider presents.
inline const ferry::tls::credentials_ptr& foreign_credentials() {
    static temp_dir dir("ferry-foreign");
    static const auto creds = issue_test_host(dir.path, "127.0.0.1");
    return creds;
}

} // namespace ferry::test
