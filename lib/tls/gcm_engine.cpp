#include "tls/gcm_engine.hpp"

#include "tls/gnutls_error.hpp"

#include <cstring>
#include <utility>

#ifdef FERRY_HAVE_IPSEC_MB
#include <intel-ipsec-mb.h>
#endif

namespace ferry::tls {

#ifdef FERRY_HAVE_IPSEC_MB

namespace {

// libipsec-mb's manager for this process: after init_mb_mgr_auto it only
// holds the function table chosen for the CPU, which the keys copy out.
// Made once, on first use, and never changed; nullptr when the library
// finds no AES-NI (its fallback is slower than GnuTLS's).
const IMB_MGR* ipsec_mb_manager(IMB_ARCH* arch_out = nullptr) noexcept {
    static IMB_ARCH arch = IMB_ARCH_NONE;
    static const IMB_MGR* const mgr = []() -> const IMB_MGR* {
        IMB_MGR* m = alloc_mb_mgr(0);
        if (!m)
            return nullptr;
        init_mb_mgr_auto(m, &arch);
        if (imb_get_errno(m) != 0 || arch == IMB_ARCH_NONE || arch == IMB_ARCH_NOAESNI) {
            free_mb_mgr(m);
            return nullptr;
        }
        return m;
    }();
    if (arch_out)
        *arch_out = arch;
    return mgr;
}

const char* arch_name(IMB_ARCH a) noexcept {
    switch (a) {
    case IMB_ARCH_SSE:
        return "libipsec-mb (sse)";
    case IMB_ARCH_AVX:
        return "libipsec-mb (avx)";
    case IMB_ARCH_AVX2:
        return "libipsec-mb (avx2)";
    case IMB_ARCH_AVX512:
        return "libipsec-mb (avx512)";
    default:
        return "libipsec-mb";
    }
}

} // namespace

struct gcm_engine::fast_key {
    // The header declares gcm_key_data 64-byte aligned only when LINUX is
    // defined; the library's code expects it either way.
    alignas(64) gcm_key_data key;
    gcm_context_data ctx;
    aes_gcm_init_t init;
    aes_gcm_enc_dec_update_t enc_update, dec_update;
    aes_gcm_enc_dec_finalize_t enc_finalize, dec_finalize;
    const char* name;
    ~fast_key() {
        gnutls_memset(&key, 0, sizeof key);
        gnutls_memset(&ctx, 0, sizeof ctx);
    }
};

#else

struct gcm_engine::fast_key {};

#endif

gcm_engine gcm_engine::make(gnutls_cipher_algorithm_t alg, const gnutls_datum_t& key,
                            implementation which) {
    if (alg != GNUTLS_CIPHER_AES_128_GCM && alg != GNUTLS_CIPHER_AES_256_GCM)
        throw error("AES-GCM engine: not an AES-GCM cipher");
    if (key.size != (alg == GNUTLS_CIPHER_AES_128_GCM ? 16u : 32u))
        throw error("AES-GCM engine: wrong key size");
    gcm_engine e;
#ifdef FERRY_HAVE_IPSEC_MB
    IMB_ARCH arch = IMB_ARCH_NONE;
    const IMB_MGR* m = which == implementation::fastest ? ipsec_mb_manager(&arch) : nullptr;
    if (m) {
        auto f = std::make_unique<fast_key>();
        const bool k128 = alg == GNUTLS_CIPHER_AES_128_GCM;
        f->init = k128 ? m->gcm128_init : m->gcm256_init;
        f->enc_update = k128 ? m->gcm128_enc_update : m->gcm256_enc_update;
        f->dec_update = k128 ? m->gcm128_dec_update : m->gcm256_dec_update;
        f->enc_finalize = k128 ? m->gcm128_enc_finalize : m->gcm256_enc_finalize;
        f->dec_finalize = k128 ? m->gcm128_dec_finalize : m->gcm256_dec_finalize;
        (k128 ? m->gcm128_pre : m->gcm256_pre)(key.data, &f->key);
        f->name = arch_name(arch);
        e._fast = std::move(f);
        return e;
    }
#else
    (void)which;
#endif
    check(gnutls_cipher_init(&e._h, alg, &key, nullptr), "TLS record cipher");
    return e;
}

const char* gcm_engine::fastest_name() noexcept {
#ifdef FERRY_HAVE_IPSEC_MB
    IMB_ARCH arch = IMB_ARCH_NONE;
    if (ipsec_mb_manager(&arch))
        return arch_name(arch);
#endif
    return "GnuTLS";
}

gcm_engine::gcm_engine(gcm_engine&& o) noexcept
    : _h(std::exchange(o._h, nullptr)), _fast(std::move(o._fast)), _decrypting(o._decrypting) {}

gcm_engine::~gcm_engine() {
    if (_h)
        gnutls_cipher_deinit(_h);
}

const char* gcm_engine::name() const noexcept {
#ifdef FERRY_HAVE_IPSEC_MB
    if (_fast)
        return _fast->name;
#endif
    return "GnuTLS";
}

bool gcm_engine::start(const uint8_t nonce[nonce_size], const std::byte* aad,
                       size_t aad_len) noexcept {
    _decrypting = false;
#ifdef FERRY_HAVE_IPSEC_MB
    if (_fast) {
        _fast->init(&_fast->key, &_fast->ctx, nonce, reinterpret_cast<const uint8_t*>(aad),
                    aad_len);
        return true;
    }
#endif
    // GnuTLS takes whole blocks until a message's last call (record_cipher
    // feeds it so); set_iv starts the message.
    gnutls_cipher_set_iv(_h, const_cast<uint8_t*>(nonce), nonce_size);
    return gnutls_cipher_add_auth(_h, aad, aad_len) >= 0;
}

bool gcm_engine::encrypt(const std::byte* in, size_t len, std::byte* out) noexcept {
    return update(false, in, len, out);
}

bool gcm_engine::decrypt(const std::byte* in, size_t len, std::byte* out) noexcept {
    return update(true, in, len, out);
}

bool gcm_engine::update(bool decrypting, const std::byte* in, size_t len, std::byte* out) noexcept {
    _decrypting = decrypting;
#ifdef FERRY_HAVE_IPSEC_MB
    if (_fast) {
        (decrypting ? _fast->dec_update
                    : _fast->enc_update)(&_fast->key, &_fast->ctx, reinterpret_cast<uint8_t*>(out),
                                         reinterpret_cast<const uint8_t*>(in), len);
        return true;
    }
#endif
    return (decrypting ? gnutls_cipher_decrypt2 : gnutls_cipher_encrypt2)(_h, in, len, out, len) >=
           0;
}

bool gcm_engine::tag(uint8_t out[tag_size]) noexcept {
#ifdef FERRY_HAVE_IPSEC_MB
    if (_fast) {
        (_decrypting ? _fast->dec_finalize : _fast->enc_finalize)(&_fast->key, &_fast->ctx, out,
                                                                  tag_size);
        return true;
    }
#endif
    return gnutls_cipher_tag(_h, out, tag_size) >= 0;
}

} // namespace ferry::tls
