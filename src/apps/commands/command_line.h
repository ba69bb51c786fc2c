#pragma once
// The command line of every optimus-cc command: CLI11 parsing with the rules
// every command gets by calling parse_command_line (and any command added later
// the same way):
//  * a value never starts with a known flag: `--save --swiglu` is "--save needs a
//    value", not a directory called --swiglu (a value that really starts with "--"
//    is attached, --flag=--x, or given as the path ./--x);
//  * a value is never empty (`--save ""` is not "no --save"), except where a
//    command says so (generate's --prompt);
//  * a floating-point value is finite (`--lr inf`, `--lr nan` are refused);
//  * `--config FILE.json`: one JSON object of flag names to values (keys with '-'
//    or '_'), expanded in place so that the command line wins; an unknown key, a
//    nested object, a switch given a value other than true/false, or a value where a
//    switch is expected is an error naming the file, its line and the key.
// Every refusal is one occ::UsageError line (exit code 2) naming the flag.
#include <initializer_list>

#include <CLI/CLI.hpp>

namespace occ::cmd {

// Parses argv. Returns -1 to go on, or the exit code (0 after --help).
// may_be_empty: the flags whose value may be the empty string.
int parse_command_line(CLI::App& app, int argc, char** argv, std::initializer_list<const char*> may_be_empty = {});

}  // namespace occ::cmd
