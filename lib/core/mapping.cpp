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

} // namespace ferry
