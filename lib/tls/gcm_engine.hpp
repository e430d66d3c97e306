// AES-GCM for Ferry's TLS record layer: one traffic key, and the calls a
// record needs (nonce and header, content in pieces, tag).
//
// Two implementations of the same cipher, chosen per key:
// - Intel's multi-buffer crypto library (libipsec-mb, Debian's
//   libipsec-mb1), where it finds AES-NI. It picks its code for the CPU
//   (SSE, AVX2, or VAES with AVX-512). On this project's VM, an AMD EPYC
//   with VAES and AVX-512, it seals 16 KiB records at ~12 GB/s, against
//   ~4.7 for GnuTLS 3.7 and ~4.4 for OpenSSL 3.0, neither of which has
//   VAES code. Pages are sealed at the source and opened at the
//   destination, so over tcp the cipher was a third of each side's CPU.
// - GnuTLS's cipher API otherwise: no libipsec-mb in the build (it is
//   x86-64 only), or a CPU without AES-NI.
// Both produce the same bytes (tests/unit/gcm_engine_test.cpp); the keys
// come from the GnuTLS session either way.
#pragma once

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ferry::tls {

class gcm_engine {
  public:
    enum class implementation { fastest, gnutls };
    static constexpr size_t nonce_size = 12, tag_size = 16;

    // For `alg` (AES-128-GCM or AES-256-GCM) and its key. Throws
    // ferry::error if GnuTLS refuses the key.
    static gcm_engine make(gnutls_cipher_algorithm_t alg, const gnutls_datum_t& key,
                           implementation which = implementation::fastest);
    // What `fastest` uses on this host, for the logs: "libipsec-mb (avx512)"
    // or "GnuTLS".
    static const char* fastest_name() noexcept;

    gcm_engine(gcm_engine&& o) noexcept;
    gcm_engine(const gcm_engine&) = delete;
    gcm_engine& operator=(const gcm_engine&) = delete;
    gcm_engine& operator=(gcm_engine&&) = delete;
    ~gcm_engine(); // wipes the key

    [[nodiscard]] const char* name() const noexcept;

    // One message: start, then encrypt (or decrypt) its text in as many
    // pieces as the caller likes, in order, then tag. False if the library
    // failed (GnuTLS only; ipsec-mb's calls cannot fail).
    [[nodiscard]] bool start(const uint8_t nonce[nonce_size], const std::byte* aad,
                             size_t aad_len) noexcept;
    [[nodiscard]] bool encrypt(const std::byte* in, size_t len, std::byte* out) noexcept;
    [[nodiscard]] bool decrypt(const std::byte* in, size_t len, std::byte* out) noexcept;
    [[nodiscard]] bool tag(uint8_t out[tag_size]) noexcept;

  private:
    struct fast_key; // libipsec-mb's expanded key and message state
    gcm_engine() = default;
    // One piece of the message's text either way; the tag then finalises
    // as the message's direction asks.
    bool update(bool decrypting, const std::byte* in, size_t len, std::byte* out) noexcept;

    gnutls_cipher_hd_t _h = nullptr;
    std::unique_ptr<fast_key> _fast;
    bool _decrypting = false;
};

} // namespace ferry::tls
