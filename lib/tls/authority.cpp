#include "tls/authority.hpp"

#include "core/error.hpp"
#include "tls/credentials.hpp"
#include "tls/gnutls_error.hpp"
#include "tls/x509.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gnutls/crypto.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <ctime>

namespace ferry::tls {

namespace fs = std::filesystem;

namespace {

constexpr time_t day = 24 * 3600;

// Written whole under a temporary name, then renamed: a reader never sees
// half a key. Keys are readable by their owner only.
void write_private(const fs::path& p, const std::string& text, mode_t mode) {
    const fs::path tmp = p.string() + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        throw sys_error("create " + tmp.string());
    const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
    const int err = errno;
    ::close(fd);
    if (!ok)
        throw sys_error("write " + tmp.string(), err);
    fs::rename(tmp, p);
}

x509_privkey generate_key() {
    auto key = new_private_key();
    check(gnutls_x509_privkey_generate(key.get(), GNUTLS_PK_ECDSA,
                                       GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0),
          "generate ECDSA key");
    return key;
}

// The common fields: version, a random serial, validity, subject, key.
x509_crt new_signed_shape(gnutls_x509_privkey_t key, const std::string& cn, time_t valid_days) {
    auto crt = new_certificate();
    check(gnutls_x509_crt_set_version(crt.get(), 3), "certificate version");
    std::array<unsigned char, 16> serial{};
    check(gnutls_rnd(GNUTLS_RND_NONCE, serial.data(), serial.size()), "random serial");
    serial[0] &= 0x7f; // positive
    check(gnutls_x509_crt_set_serial(crt.get(), serial.data(), serial.size()), "serial");
    const time_t now = ::time(nullptr);
    check(gnutls_x509_crt_set_activation_time(crt.get(), now - 3600), "activation time");
    check(gnutls_x509_crt_set_expiration_time(crt.get(), now + valid_days * day), "expiration");
    check(gnutls_x509_crt_set_dn_by_oid(crt.get(), GNUTLS_OID_X520_COMMON_NAME, 0, cn.data(),
                                        unsigned(cn.size())),
          "common name");
    check(gnutls_x509_crt_set_key(crt.get(), key), "certificate key");
    unsigned char id[64];
    size_t id_len = sizeof id;
    check(gnutls_x509_crt_get_key_id(crt.get(), GNUTLS_KEYID_USE_SHA1, id, &id_len), "key id");
    check(gnutls_x509_crt_set_subject_key_id(crt.get(), id, id_len), "subject key id");
    return crt;
}

bool is_ip(const std::string& s, unsigned char* out, size_t& len) {
    if (inet_pton(AF_INET, s.c_str(), out) == 1) {
        len = 4;
        return true;
    }
    if (inet_pton(AF_INET6, s.c_str(), out) == 1) {
        len = 16;
        return true;
    }
    return false;
}

bool valid_name(const std::string& s) {
    if (s.empty() || s.size() > 64)
        return false;
    for (char c : s)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
              c == ':'))
            return false;
    return true;
}

} // namespace

void init_authority(const fs::path& dir) {
    if (fs::exists(dir / ca_file) || fs::exists(dir / ca_key_file))
        throw error(fmt::format("{} already holds a CA: not replacing it", dir.string()));
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms::owner_all);
    auto key = generate_key();
    char host[256] = "ferry";
    (void)::gethostname(host, sizeof host - 1);
    auto crt = new_signed_shape(key.get(), fmt::format("Ferry cluster CA ({})", host), 3650);
    check(gnutls_x509_crt_set_basic_constraints(crt.get(), 1, 0), "basic constraints");
    check(gnutls_x509_crt_set_key_usage(crt.get(), GNUTLS_KEY_KEY_CERT_SIGN | GNUTLS_KEY_CRL_SIGN),
          "key usage");
    check(gnutls_x509_crt_sign2(crt.get(), crt.get(), key.get(), GNUTLS_DIG_SHA256, 0),
          "self-sign the CA");
    write_private(dir / ca_key_file, to_pem(key.get()), 0600);
    write_private(dir / ca_file, to_pem(crt.get()), 0644);
}

void issue_host(const fs::path& ca_dir, host_request host, const fs::path& out_dir) {
    if (!valid_name(host.name))
        throw error(fmt::format("'{}' is not a host name or address", host.name));
    if (!fs::exists(ca_dir / ca_key_file))
        throw error(fmt::format("no CA in {}: create one with `migrator credentials init`",
                                ca_dir.string()));
    auto ca = read_certificate(ca_dir / ca_file);
    auto ca_key = read_private_key(ca_dir / ca_key_file);

    unsigned char ip[16];
    size_t ip_len = 0;
    if (is_ip(host.name, ip, ip_len))
        host.addresses.push_back(host.name);
    else
        host.dns_names.push_back(host.name);

    auto key = generate_key();
    auto crt = new_signed_shape(key.get(), host.name, 730);
    check(gnutls_x509_crt_set_basic_constraints(crt.get(), 0, -1), "basic constraints");
    check(gnutls_x509_crt_set_key_usage(crt.get(), GNUTLS_KEY_DIGITAL_SIGNATURE), "key usage");
    check(gnutls_x509_crt_set_key_purpose_oid(crt.get(), GNUTLS_KP_TLS_WWW_SERVER, 0),
          "key purpose");
    check(gnutls_x509_crt_set_key_purpose_oid(crt.get(), GNUTLS_KP_TLS_WWW_CLIENT, 0),
          "key purpose");
    for (const auto& a : host.addresses) {
        if (!is_ip(a, ip, ip_len))
            throw error(fmt::format("'{}' is not an IP address", a));
        check(gnutls_x509_crt_set_subject_alt_name(crt.get(), GNUTLS_SAN_IPADDRESS, ip,
                                                   unsigned(ip_len), GNUTLS_FSAN_APPEND),
              "address in the SAN");
    }
    for (const auto& n : host.dns_names) {
        if (!valid_name(n))
            throw error(fmt::format("'{}' is not a DNS name", n));
        check(gnutls_x509_crt_set_subject_alt_name(crt.get(), GNUTLS_SAN_DNSNAME, n.data(),
                                                   unsigned(n.size()), GNUTLS_FSAN_APPEND),
              "name in the SAN");
    }
    unsigned char id[64];
    size_t id_len = sizeof id;
    check(gnutls_x509_crt_get_subject_key_id(ca.get(), id, &id_len, nullptr), "CA key id");
    check(gnutls_x509_crt_set_authority_key_id(crt.get(), id, id_len), "authority key id");
    check(gnutls_x509_crt_sign2(crt.get(), ca.get(), ca_key.get(), GNUTLS_DIG_SHA256, 0),
          "sign the host certificate");

    fs::create_directories(out_dir);
    fs::permissions(out_dir, fs::perms::owner_all);
    write_private(out_dir / key_file, to_pem(key.get()), 0600);
    write_private(out_dir / cert_file, to_pem(crt.get()), 0644);
    if (fs::absolute(out_dir) != fs::absolute(ca_dir))
        fs::copy_file(ca_dir / ca_file, out_dir / ca_file, fs::copy_options::overwrite_existing);
}

} // namespace ferry::tls
