#include "sys/mountinfo.hpp"

#include <fstream>
#include <sstream>

namespace ferry {

namespace {

std::string unescape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '\\' && i + 3 < s.size()) {
            const auto oct = s.substr(i + 1, 3);
            if (oct.find_first_not_of("01234567") == std::string::npos) {
                out += char(std::stoi(oct, nullptr, 8));
                i += 3;
                continue;
            }
        }
        out += s[i];
    }
    return out;
}

} // namespace

std::vector<mount_entry> parse_mountinfo(const std::string& text) {
    std::vector<mount_entry> out;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        // ID PARENT MAJ:MIN ROOT POINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER
        std::istringstream f(line);
        std::string id, parent, dev, root, point, options, word, source;
        mount_entry m;
        if (!(f >> id >> parent >> dev >> root >> point >> options))
            continue;
        while (f >> word && word != "-") {
        }
        if (word != "-" || !(f >> m.fstype >> source))
            continue;
        f >> m.super_options;
        m.root = unescape(root);
        m.point = unescape(point);
        out.push_back(std::move(m));
    }
    return out;
}

std::vector<std::string> comma_list(const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string item; std::getline(in, item, ',');)
        if (!item.empty())
            out.push_back(item);
    return out;
}

std::vector<mount_entry> read_mountinfo(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return parse_mountinfo(text.str());
}

} // namespace ferry
