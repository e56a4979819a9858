#include "cli/config_file.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include <toml++/toml.h>

namespace ragkv::cli {
namespace {

// Scalar: a TOML value as the command-line text CLI11 converts; false for
// what no flag takes (tables, dates, times).
bool Scalar(const toml::node& n, std::string* out) {
  if (auto s = n.value<std::string>(); s && n.is_string()) {
    *out = *s;
  } else if (n.is_integer()) {
    *out = absl::StrCat(*n.value<int64_t>());
  } else if (n.is_floating_point()) {
    *out = absl::StrFormat("%.17g", *n.value<double>());
  } else if (n.is_boolean()) {
    *out = *n.value<bool>() ? "true" : "false";
  } else {
    return false;
  }
  return true;
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

absl::Status ApplyConfigFile(CLI::App* cmd, const std::string& path, const CLI::App* shared_with) {
  toml::table tbl;
  try {
    tbl = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    if (e.source().begin.line == 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::string(e.description())));
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d:%d: %s", path, e.source().begin.line,
                                                      e.source().begin.column, std::string(e.description())));
  }
  for (auto&& [key, node] : tbl) {
    std::string name(key.str());
    std::replace(name.begin(), name.end(), '_', '-');
    const int line = static_cast<int>(node.source().begin.line);
    auto fail = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrFormat("%s:%d: key '%s': %s", path, line, key.str(), why));
    };
    if (name == "config" || name == "print-config" || name == "help") return fail("not settable in a file");
    if ((absl::StrContains(name, "token") || absl::StrContains(name, "password")) &&
        !absl::StrContains(name, "file")) {
      return fail("a secret does not belong in a config file (use the -file flag)");
    }
    CLI::Option* opt = cmd->get_option_no_throw("--" + name);
    if (opt == nullptr && shared_with != nullptr &&
        shared_with->get_option_no_throw("--" + name) != nullptr) {
      continue;  // another command's setting in a shared file
    }
    if (opt == nullptr) return fail(absl::StrCat("unknown (not a flag of ragkv ", cmd->get_name(), ")"));
    if (opt->count() > 0) continue;  // the command line wins
    std::vector<std::string> values;
    std::string v;
    if (const toml::array* arr = node.as_array()) {
      for (const toml::node& e : *arr) {
        if (!Scalar(e, &v)) return fail("array elements must be strings, numbers or booleans");
        values.push_back(v);
      }
    } else if (Scalar(node, &v)) {
      values.push_back(v);
    } else {
      return fail("must be a string, number, boolean or array");
    }
    if (values.size() != 1 && opt->get_items_expected_max() <= 1) return fail("takes one value");
    for (const std::string& x : values) opt->add_result(x);
    try {
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return fail(e.what());
    }
  }
  return absl::OkStatus();
}

std::string EffectiveConfig(const CLI::App* cmd) {
  std::string out = absl::StrCat("# ragkv ", cmd->get_name(), ": the effective configuration\n");
  for (const CLI::Option* opt : cmd->get_options()) {
    if (opt->get_lnames().empty()) continue;
    const std::string& name = opt->get_lnames().front();
    if (name == "help" || name == "config" || name == "print-config") continue;
    std::vector<std::string> values = opt->results();
    if (opt->count() == 0) {
      if (opt->get_default_str().empty()) {
        absl::StrAppend(&out, "# ", name, " = (unset)\n");
        continue;
      }
      values = {opt->get_default_str()};
      const std::string& d = values.front();
      if (opt->get_items_expected_max() > 1 && d.size() >= 2 && d.front() == '[' && d.back() == ']') {
        values = absl::StrSplit(d.substr(1, d.size() - 2), ',', absl::SkipEmpty());
      }
    }
    if ((absl::StrContains(name, "token") || absl::StrContains(name, "password")) &&
        !absl::StrContains(name, "file")) {
      absl::StrAppend(&out, "# ", name, " = (redacted)\n");
      continue;
    }
    std::vector<std::string> quoted;
    for (const std::string& x : values) quoted.push_back(Quote(x));
    const bool list = opt->get_items_expected_max() > 1;
    if (!list && quoted.empty()) continue;
    absl::StrAppend(&out, name, " = ",
                    list ? absl::StrCat("[", absl::StrJoin(quoted, ", "), "]") : quoted.front(), "\n");
  }
  return out;
}

}  // namespace ragkv::cli
