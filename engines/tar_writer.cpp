#include "tar_writer.hpp"

#include "core/error.hpp"
#include "core/unique_fd.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <memory>
#include <vector>

namespace ferry {

namespace {

using entry_ptr = std::unique_ptr<archive_entry, decltype(&archive_entry_free)>;

} // namespace

tar_writer::tar_writer(const std::filesystem::path& out) : _out(out), _a(archive_write_new()) {
    if (!_a || archive_write_set_format_pax_restricted(_a) != ARCHIVE_OK ||
        archive_write_open_filename(_a, out.c_str()) != ARCHIVE_OK)
        throw error(fmt::format("cannot create {}: {}", out.string(),
                                _a ? archive_error_string(_a) : "out of memory"));
}

tar_writer::~tar_writer() {
    if (_a)
        archive_write_free(_a);
}

void tar_writer::add_bytes(const std::string& name, std::span<const uint8_t> data, mode_t mode) {
    entry_ptr e(archive_entry_new(), archive_entry_free);
    archive_entry_set_pathname(e.get(), name.c_str());
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_perm(e.get(), mode);
    archive_entry_set_size(e.get(), la_int64_t(data.size()));
    if (archive_write_header(_a, e.get()) != ARCHIVE_OK ||
        (!data.empty() && archive_write_data(_a, data.data(), data.size()) < 0))
        throw error(
            fmt::format("{}: writing {}: {}", _out.string(), name, archive_error_string(_a)));
    progress();
}

void tar_writer::add_path(const std::string& name, const std::filesystem::path& src) {
    struct stat st {};
    if (::lstat(src.c_str(), &st))
        throw sys_error("lstat " + src.string());
    entry_ptr e(archive_entry_new(), archive_entry_free);
    archive_entry_set_pathname(e.get(), name.c_str());
    archive_entry_copy_stat(e.get(), &st);
    std::string target;
    if (S_ISLNK(st.st_mode)) {
        target = std::filesystem::read_symlink(src).string();
        archive_entry_set_symlink(e.get(), target.c_str());
        archive_entry_set_size(e.get(), 0);
    } else if (S_ISDIR(st.st_mode)) {
        archive_entry_set_size(e.get(), 0);
    } else if (S_ISSOCK(st.st_mode)) {
        throw error(fmt::format("{} is a socket, which tar cannot carry", src.string()));
    } else if (!S_ISREG(st.st_mode)) {
        archive_entry_set_size(e.get(), 0); // fifo or device node: metadata only
    }
    if (archive_write_header(_a, e.get()) != ARCHIVE_OK)
        throw error(
            fmt::format("{}: writing {}: {}", _out.string(), name, archive_error_string(_a)));
    progress();
    if (!S_ISREG(st.st_mode))
        return;
    unique_fd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!in)
        throw sys_error("open " + src.string());
    std::vector<char> buf(1 << 20);
    for (;;) {
        const ssize_t n = ::read(in.get(), buf.data(), buf.size());
        if (n < 0)
            throw sys_error("read " + src.string());
        if (n == 0)
            break;
        if (archive_write_data(_a, buf.data(), size_t(n)) < 0)
            throw error(
                fmt::format("{}: writing {}: {}", _out.string(), name, archive_error_string(_a)));
        progress();
    }
}

void tar_writer::add_tree(const std::string& prefix, const std::filesystem::path& dir) {
    for (auto it = std::filesystem::recursive_directory_iterator(dir);
         it != std::filesystem::recursive_directory_iterator(); ++it) {
        const auto rel = it->path().lexically_relative(dir).string();
        add_path(prefix.empty() ? rel : prefix + "/" + rel, it->path());
    }
}

void tar_writer::close() {
    if (_a && archive_write_close(_a) != ARCHIVE_OK)
        throw error(fmt::format("closing {}: {}", _out.string(), archive_error_string(_a)));
}

} // namespace ferry
