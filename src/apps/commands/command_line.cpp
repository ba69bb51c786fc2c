#include "apps/commands/command_line.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/output_paths.h"

namespace occ::cmd {

namespace {

// The flag an argument names ("--lr" of "--lr=1e-3"; "" for a value).
std::string flag_name(const std::string& arg) {
  if (arg.rfind("--", 0) != 0) return "";
  return arg.substr(0, arg.find('='));
}

// A switch (--swiglu) takes no value; every other option takes one or more.
bool is_switch(const CLI::Option* o) { return o->get_items_expected_max() == 0; }

// Does `word` name a flag of this command (so that it cannot be a value)?
bool names_flag(const CLI::App& app, const std::string& word) {
  if (word == "-h") return true;
  const std::string name = flag_name(word);
  return !name.empty() && (name == "--help" || app.get_option_no_throw(name) != nullptr);
}

// Where a value of a --config file came from, for messages.
struct ConfigSource {
  std::string file, key;
  int line = 0;  // 0: not found in the text
  std::string describe() const {
    return fmt::format("--config {}{}, key '{}'", file, line > 0 ? fmt::format(" line {}", line) : "", printable(key));
  }
};

// The line of `"key":` in a JSON text (1-based), or 0.
int line_of_key(const std::string& text, const std::string& key) {
  const std::string quoted = nlohmann::json(key).dump();  // as JSON writes it
  for (size_t at = text.find(quoted); at != std::string::npos; at = text.find(quoted, at + 1)) {
    size_t after = at + quoted.size();
    while (after < text.size() && std::isspace(static_cast<unsigned char>(text[after]))) ++after;
    if (after < text.size() && text[after] == ':') return 1 + int(std::count(text.begin(), text.begin() + ptrdiff_t(at), '\n'));
  }
  return 0;
}

struct ConfigGroup {
  std::vector<std::string> args;  // the flag and its words
  ConfigSource source;
};

// Turns {"num-layers": 4, "fp16": true, ...} into [["--num-layers", "4"], ["--fp16"], ...],
// each key checked against the command's flags.
std::vector<ConfigGroup> config_to_args(const std::string& path, const CLI::App& app) {
  std::ifstream in(path, std::ios::binary);
  OCC_CHECK(in.good(), "cannot open --config file {}; check the path", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {  // the message gives the line and column
    throw UsageError(fmt::format("--config file {} is not valid JSON ({}); fix the file", path, e.what()));
  }
  if (!j.is_object())
    throw UsageError(fmt::format("--config file {} must hold one JSON object of flag names to values", path));
  std::vector<ConfigGroup> groups;
  for (auto& [key, value] : j.items()) {
    const ConfigSource source{path, key, line_of_key(text, key)};
    auto refuse = [&](const std::string& why) { throw UsageError(fmt::format("{}: {}", source.describe(), why)); };
    std::string flag = "--" + key;
    for (auto& c : flag)
      if (c == '_') c = '-';
    if (flag == "--config") refuse("a --config file cannot name another; merge the two files");
    const CLI::Option* o = key.empty() ? nullptr : app.get_option_no_throw(flag);
    if (!o)
      refuse(fmt::format("'optimus-cc {}' has no flag {}; remove the key or correct its name (the keys are the flag "
                         "names, with '-' or '_')",
                         app.get_name(), printable(flag)));
    if (value.is_object())
      refuse("holds an object, but a config file is flat: one key per flag, e.g. {\"num-layers\": 4}");
    if (value.is_null()) refuse("is null; give a value, or remove the key");
    ConfigGroup g{{flag}, source};
    if (is_switch(o)) {
      if (!value.is_boolean())
        refuse(fmt::format("{} is a switch: give true or false (got {})", flag, printable(value.dump())));
      if (!value.get<bool>()) continue;  // false: the flag not given
    } else if (value.is_boolean()) {
      refuse(fmt::format("{} takes a value, not {}", flag, value.dump()));
    } else if (value.is_array()) {  // a flag of several words: "data-path": [0.7, "A", 0.3, "B"]
      if (o->get_items_expected_max() <= 1) refuse(fmt::format("{} takes one value, not a list", flag));
      if (value.empty()) refuse("is an empty list; give its words, or remove the key");
      for (const auto& word : value) {
        if (!word.is_string() && !word.is_number()) refuse("a list may hold numbers and strings only");
        g.args.push_back(word.is_string() ? word.get<std::string>() : word.dump());
      }
    } else {
      g.args.push_back(value.is_string() ? value.get<std::string>() : value.dump());
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace

int parse_command_line(CLI::App& app, int argc, char** argv, std::initializer_list<const char*> may_be_empty) {
  const std::set<std::string> empty_ok(may_be_empty.begin(), may_be_empty.end());
  std::string config_path;
  app.add_option("--config", config_path, "JSON file of flag values (flags given on the command line win)");
  // A flag given twice (in --config and on the command line) takes the last value.
  for (CLI::Option* o : app.get_options()) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::vector<std::string> args{argv[0]}, config_paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config" || a.rfind("--config=", 0) == 0) {
      const bool attached = a != "--config";
      if (!attached && (i + 1 >= argc || names_flag(app, argv[i + 1])))
        throw UsageError(fmt::format("--config needs a file name{}", i + 1 < argc ? fmt::format(" (the next word, {}, is a flag)", printable(argv[i + 1])) : ""));
      const std::string path = attached ? a.substr(9) : argv[++i];
      if (path.empty()) throw UsageError("--config needs a file name, not an empty string");
      config_paths.push_back(path);
      OutputPaths::command_line_input("--config", path);  // no output of the command may overwrite it
      continue;
    }
    args.push_back(a);
  }
  // Config values go first, and a flag the command line gives is dropped from them:
  // every command-line flag overrides the file, flags of several words too (--data-path).
  std::set<std::string> given;
  for (const auto& a : args) given.insert(flag_name(a));
  std::vector<std::string> from_config;
  std::map<std::string, ConfigSource> config_source;  // flag -> where its value came from
  for (const auto& path : config_paths)
    for (auto& group : config_to_args(path, app))
      if (!given.count(group.args[0])) {
        from_config.insert(from_config.end(), group.args.begin(), group.args.end());
        config_source.insert_or_assign(group.args[0], group.source);
      }
  args.insert(args.begin() + 1, from_config.begin(), from_config.end());
  auto named = [&](const std::string& flag) {
    auto it = config_source.find(flag);
    return it == config_source.end() ? flag : fmt::format("{} (from {})", flag, it->second.describe());
  };
  // A value never starts with a known flag: `--save --swiglu` would otherwise save
  // into a directory called --swiglu and train without SwiGLU.
  for (size_t i = 1; i < args.size(); ++i) {
    const CLI::Option* o = names_flag(app, args[i]) ? app.get_option_no_throw(flag_name(args[i])) : nullptr;
    if (!o || is_switch(o)) continue;
    const std::string flag = flag_name(args[i]);
    const size_t eq = args[i].find('=');
    if (eq != std::string::npos) {  // --flag=VALUE: the value is attached
      if (eq + 1 == args[i].size() && !empty_ok.count(flag))
        throw UsageError(fmt::format("{} is an empty string; give a value, or leave {} out", named(flag), flag));
    } else {
      if (i + 1 >= args.size()) throw UsageError(fmt::format("{} needs a value", named(flag)));
      if (names_flag(app, args[i + 1]))
        throw UsageError(fmt::format("{} needs a value (the next word, {}, is a flag); give the value (one that "
                                     "really starts with '--' attached, {}={}, or as a path ./{})",
                                     named(flag), printable(args[i + 1]), flag, printable(args[i + 1]),
                                     printable(args[i + 1])));
    }
    // A whole number beyond 64 bits (CLI11 would take the largest one in its place).
    const std::string value = eq != std::string::npos ? args[i].substr(eq + 1) : args[i + 1];
    const std::string type = o->get_type_name();
    if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0) {
      int64_t v = 0;
      uint64_t u = 0;
      const char *begin = value.data(), *end = value.data() + value.size();
      const bool out_of_range = type[0] == 'U' ? std::from_chars(begin, end, u).ec == std::errc::result_out_of_range
                                               : std::from_chars(begin, end, v).ec == std::errc::result_out_of_range;
      if (out_of_range)
        throw UsageError(fmt::format("{} {} is out of range: it takes a whole number of at most {}", named(flag),
                                     printable(value), type[0] == 'U' ? fmt::format("{}", UINT64_MAX)
                                                                      : fmt::format("{}", INT64_MAX)));
    }
  }
  // A flag of several words given twice keeps its last words, as a one-word flag keeps
  // its last value (CLI11 would append them): --data-path A ... --data-path B trains on B.
  std::set<std::string> several;
  for (const CLI::Option* o : app.get_options())
    if (o->get_items_expected_max() > 1)
      for (const auto& name : o->get_lnames()) several.insert("--" + name);
  std::map<std::string, size_t> last;  // flag -> index of its last occurrence
  for (size_t i = 1; i < args.size(); ++i)
    if (several.count(flag_name(args[i]))) last[flag_name(args[i])] = i;
  std::vector<std::string> kept{args[0]};
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string flag = flag_name(args[i]);
    if (several.count(flag) && last[flag] != i) {  // an earlier occurrence: skip it and its words
      if (args[i].find('=') == std::string::npos)
        while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) ++i;
      continue;
    }
    kept.push_back(args[i]);
  }
  args.swap(kept);
  std::vector<char*> ptrs;
  for (auto& a : args) ptrs.push_back(a.data());
  try {
    app.parse(int(ptrs.size()), ptrs.data());
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ConversionError& e) {
    // "Could not convert: --lr = 1,abc": name the flag and the value given (the last).
    std::string message = e.what();
    const std::string prefix = "Could not convert: ";
    const size_t eq = message.find(" = ");
    if (message.rfind(prefix, 0) == 0 && eq != std::string::npos) {
      const std::string flag = message.substr(prefix.size(), eq - prefix.size());
      std::string value = message.substr(eq + 3);
      if (const size_t comma = value.rfind(','); comma != std::string::npos) value = value.substr(comma + 1);
      const CLI::Option* o = app.get_option_no_throw(flag);
      const std::string type = o ? o->get_type_name() : "";
      // "abc" is no number at all; "2147483648" is one the flag cannot hold.
      const bool digits = value.find_first_not_of("+-0123456789") == std::string::npos &&
                          value.find_first_of("0123456789") != std::string::npos;
      const char* kind = type.rfind("FLOAT", 0) == 0  ? "a number"
                         : type.rfind("UINT", 0) == 0 ? (digits ? "a whole number >= 0 in the flag's range"
                                                                : "a whole number (>= 0)")
                         : type.rfind("INT", 0) == 0  ? (digits ? "a whole number in the flag's range"
                                                                : "a whole number")
                                                      : "a value this flag takes";
      message = fmt::format("{} {} is not {}", named(flag), printable(value), kind);
    }
    throw UsageError(fmt::format("{}; run 'optimus-cc {} --help' for the options", message, app.get_name()));
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    for (char& c : message)
      if (c == '\n' || c == '\r') c = ' ';
    // A value from a config file: name the file, line and key.
    for (const auto& [flag, source] : config_source) {
      const size_t at = message.find(flag);
      const char next = at == std::string::npos || at + flag.size() >= message.size() ? ' ' : message[at + flag.size()];
      if (at != std::string::npos && !std::isalnum(static_cast<unsigned char>(next)) && next != '-') {
        message += fmt::format(" (from {})", source.describe());
        break;
      }
    }
    throw UsageError(fmt::format("{}; run 'optimus-cc {} --help' for the options", message, app.get_name()));
  }
  // Values CLI11 accepts but no flag means: an empty string (not "the flag left
  // out"), and a floating-point value that is not finite.
  for (const CLI::Option* o : app.get_options()) {
    if (o->count() == 0 || is_switch(o)) continue;
    const std::string flag = "--" + (o->get_lnames().empty() ? o->get_name() : o->get_lnames().front());
    const bool floating = o->get_type_name().rfind("FLOAT", 0) == 0;
    for (const std::string& value : o->results()) {
      if (value.empty() && !empty_ok.count(flag))
        throw UsageError(fmt::format("{} is an empty string; give a value, or leave {} out", named(flag), flag));
      if (floating) {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (end != value.c_str() && (!std::isfinite(v) || std::fabs(v) > FLT_MAX))
          throw UsageError(fmt::format("{} {} is not a finite number; give a finite value", named(flag),
                                       printable(value)));
      }
    }
  }
  return -1;
}

}  // namespace occ::cmd
