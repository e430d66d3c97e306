// A host's credentials: the cluster CA it trusts, its own certificate and
// key (PEM files in one directory), and the policy for who may talk to it.
#pragma once

#include <gnutls/gnutls.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace ferry::tls {

inline constexpr const char* default_credentials_dir = "/etc/ferry/credentials";
inline constexpr const char* ca_file = "ca.pem";
inline constexpr const char* ca_key_file = "ca-key.pem";
inline constexpr const char* cert_file = "cert.pem";
inline constexpr const char* key_file = "key.pem";

// --credentials DIR if given, else $FERRY_CREDENTIALS, else
// /etc/ferry/credentials. Read once, in a binary's main.
[[nodiscard]] std::filesystem::path credentials_dir(const std::string& from_command_line);

// Whom a daemon accepts: any certificate the cluster CA signed, or, when
// `names` is not empty, only those common names.
struct peer_policy {
    std::vector<std::string> names;
    [[nodiscard]] bool allows(const std::string& identity) const;
};

class credentials {
  public:
    // Loads DIR/ca.pem, DIR/cert.pem and DIR/key.pem; throws ferry::error
    // naming what is missing and how to create it.
    static std::shared_ptr<const credentials> load(const std::filesystem::path& dir);
    ~credentials();
    credentials(const credentials&) = delete;
    credentials& operator=(const credentials&) = delete;

    [[nodiscard]] gnutls_certificate_credentials_t get() const noexcept { return _creds; }
    // This host's name: the common name of its certificate.
    [[nodiscard]] const std::string& identity() const noexcept { return _identity; }
    [[nodiscard]] const std::filesystem::path& dir() const noexcept { return _dir; }

  private:
    credentials() = default;
    gnutls_certificate_credentials_t _creds = nullptr;
    std::string _identity;
    std::filesystem::path _dir;
};

using credentials_ptr = std::shared_ptr<const credentials>;

} // namespace ferry::tls
