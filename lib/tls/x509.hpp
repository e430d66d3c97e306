// Owners of GnuTLS's X.509 objects, and the few reads Ferry needs of them.
#pragma once

#include <gnutls/x509.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace ferry::tls {

struct crt_deleter {
    void operator()(gnutls_x509_crt_int* c) const noexcept { gnutls_x509_crt_deinit(c); }
};
struct privkey_deleter {
    void operator()(gnutls_x509_privkey_int* k) const noexcept { gnutls_x509_privkey_deinit(k); }
};
using x509_crt = std::unique_ptr<gnutls_x509_crt_int, crt_deleter>;
using x509_privkey = std::unique_ptr<gnutls_x509_privkey_int, privkey_deleter>;

[[nodiscard]] x509_crt new_certificate();
[[nodiscard]] x509_privkey new_private_key();

// The first certificate of a PEM file, and a PEM private key.
[[nodiscard]] x509_crt read_certificate(const std::filesystem::path& pem);
[[nodiscard]] x509_privkey read_private_key(const std::filesystem::path& pem);
// A certificate in DER (as a TLS peer presents it).
[[nodiscard]] x509_crt import_der(const gnutls_datum_t& der);

[[nodiscard]] std::string common_name(gnutls_x509_crt_t crt);
// The IP addresses and DNS names in the subject alternative name.
[[nodiscard]] std::vector<std::string> alt_names(gnutls_x509_crt_t crt);

[[nodiscard]] std::string to_pem(gnutls_x509_crt_t crt);
[[nodiscard]] std::string to_pem(gnutls_x509_privkey_t key);

} // namespace ferry::tls
