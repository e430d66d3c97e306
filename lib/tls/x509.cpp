#include "tls/x509.hpp"

#include "core/error.hpp"
#include "tls/gnutls_error.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace ferry::tls {

namespace {

std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in)
        throw error(fmt::format("cannot read {}", p.string()));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

gnutls_datum_t datum_of(const std::string& s) {
    return {reinterpret_cast<unsigned char*>(const_cast<char*>(s.data())), unsigned(s.size())};
}

// Copies a GnuTLS-allocated datum and frees it.
std::string take(gnutls_datum_t d) {
    std::string s(reinterpret_cast<const char*>(d.data), d.size);
    gnutls_free(d.data);
    return s;
}

} // namespace

x509_crt new_certificate() {
    gnutls_x509_crt_t c = nullptr;
    check(gnutls_x509_crt_init(&c), "x509 certificate");
    return x509_crt(c);
}

x509_privkey new_private_key() {
    gnutls_x509_privkey_t k = nullptr;
    check(gnutls_x509_privkey_init(&k), "x509 private key");
    return x509_privkey(k);
}

x509_crt read_certificate(const std::filesystem::path& pem) {
    const std::string text = read_file(pem);
    auto c = new_certificate();
    const gnutls_datum_t d = datum_of(text);
    check(gnutls_x509_crt_import(c.get(), &d, GNUTLS_X509_FMT_PEM),
          fmt::format("parse {}", pem.string()).c_str());
    return c;
}

x509_privkey read_private_key(const std::filesystem::path& pem) {
    const std::string text = read_file(pem);
    auto k = new_private_key();
    const gnutls_datum_t d = datum_of(text);
    check(gnutls_x509_privkey_import(k.get(), &d, GNUTLS_X509_FMT_PEM),
          fmt::format("parse {}", pem.string()).c_str());
    return k;
}

x509_crt import_der(const gnutls_datum_t& der) {
    auto c = new_certificate();
    check(gnutls_x509_crt_import(c.get(), &der, GNUTLS_X509_FMT_DER), "parse peer certificate");
    return c;
}

std::string common_name(gnutls_x509_crt_t crt) {
    char buf[256];
    size_t len = sizeof buf;
    if (gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0, buf, &len) < 0)
        return {};
    return std::string(buf, len);
}

std::vector<std::string> alt_names(gnutls_x509_crt_t crt) {
    std::vector<std::string> out;
    for (unsigned i = 0;; i++) {
        char buf[256];
        size_t len = sizeof buf;
        const int type = gnutls_x509_crt_get_subject_alt_name(crt, i, buf, &len, nullptr);
        if (type == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE)
            break;
        if (type == GNUTLS_SAN_DNSNAME) {
            out.emplace_back(buf, len);
        } else if (type == GNUTLS_SAN_IPADDRESS && (len == 4 || len == 16)) {
            char text[INET6_ADDRSTRLEN];
            if (inet_ntop(len == 4 ? AF_INET : AF_INET6, buf, text, sizeof text))
                out.emplace_back(text);
        } else if (type < 0 && type != GNUTLS_E_SHORT_MEMORY_BUFFER) {
            break;
        }
    }
    return out;
}

std::string to_pem(gnutls_x509_crt_t crt) {
    gnutls_datum_t d{};
    check(gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &d), "export certificate");
    return take(d);
}

std::string to_pem(gnutls_x509_privkey_t key) {
    gnutls_datum_t d{};
    check(gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &d), "export private key");
    return take(d);
}

} // namespace ferry::tls
