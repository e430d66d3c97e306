#include "tls/credentials.hpp"

#include "core/error.hpp"
#include "tls/gnutls_error.hpp"
#include "tls/x509.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

namespace ferry::tls {

namespace fs = std::filesystem;

fs::path credentials_dir(const std::string& from_command_line) {
    if (!from_command_line.empty())
        return from_command_line;
    if (const char* env = std::getenv("FERRY_CREDENTIALS"); env && *env)
        return env;
    return default_credentials_dir;
}

bool peer_policy::allows(const std::string& identity) const {
    return names.empty() || std::find(names.begin(), names.end(), identity) != names.end();
}

std::shared_ptr<const credentials> credentials::load(const fs::path& dir) {
    for (const char* name : {ca_file, cert_file, key_file})
        if (!fs::exists(dir / name))
            throw error(fmt::format(
                "no {} in the credentials directory {}: create a cluster CA with `migrator "
                "credentials init` and this host's certificate with `migrator credentials issue "
                "HOST` (or pass --credentials DIR)",
                name, dir.string()));
    std::shared_ptr<credentials> c(new credentials());
    c->_dir = dir;
    check(gnutls_certificate_allocate_credentials(&c->_creds), "allocate TLS credentials");
    const std::string ca = (dir / ca_file).string();
    if (check(gnutls_certificate_set_x509_trust_file(c->_creds, ca.c_str(), GNUTLS_X509_FMT_PEM),
              ca.c_str()) == 0)
        throw error(fmt::format("{} holds no certificate", ca));
    const std::string cert = (dir / cert_file).string();
    const std::string key = (dir / key_file).string();
    check(gnutls_certificate_set_x509_key_file(c->_creds, cert.c_str(), key.c_str(),
                                               GNUTLS_X509_FMT_PEM),
          fmt::format("load {} and {}", cert, key).c_str());
    c->_identity = common_name(read_certificate(dir / cert_file).get());
    if (c->_identity.empty())
        throw error(fmt::format("{} has no common name: reissue it", cert));
    return c;
}

credentials::~credentials() {
    if (_creds)
        gnutls_certificate_free_credentials(_creds);
}

} // namespace ferry::tls
