#include "core/mapping.hpp"

#include "core/error.hpp"

namespace ferry {

mapping mapping::anonymous(size_t bytes, const std::string& what, int extra_flags) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
    if (p == MAP_FAILED)
        throw sys_error("mmap " + what);
    return mapping(p, bytes);
}

mapping mapping::of_file(int fd, size_t bytes, int prot, int flags, const std::string& what) {
    void* p = ::mmap(nullptr, bytes, prot, flags, fd, 0);
    if (p == MAP_FAILED)
        throw sys_error("mmap " + what);
    return mapping(p, bytes);
}

void mapping::grow(size_t bytes, bool populate, const std::string& what) {
    if (bytes <= _size)
        return;
    void* p = ::mremap(_base, _size, bytes, MREMAP_MAYMOVE);
    if (p == MAP_FAILED)
        throw sys_error("mremap " + what);
    const size_t old = _size;
    _base = p;
    _size = bytes;
    // Best effort (Linux 5.14+): what is left faults in on first use.
    if (populate)
        (void)::madvise(data() + old, bytes - old, MADV_POPULATE_WRITE);
}

} // namespace ferry
