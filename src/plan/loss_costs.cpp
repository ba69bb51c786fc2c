#include "plan/loss_costs.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace occ::plan {

std::string LinkSetting::describe() const {
  std::string s = method;
  if (method == "powersgd") s += fmt::format(" r{}", rank);
  if (method == "topk" || method == "topk2") s += fmt::format(" {:g}%", fraction * 100);
  if (method == "adaptive") s += fmt::format(" F {:g}", high_fraction);
  if (rotation > 0) s += fmt::format(" rotated (hadamard:{})", rotation);
  if (stochastic) s += " stochastic";
  if (!lossless.empty()) s += " + " + lossless;
  if (lep) s += lep_decay != 1.0 ? fmt::format(" +LEP decay {:g}", lep_decay) : std::string(" +LEP");
  if (ec) s += " +EC";
  if (error_feedback) s += " +EF";
  if (sc > 0) s += fmt::format(" +SC{}", sc);
  if (warmup > 0) s += fmt::format(" (warm-up {:g})", warmup);
  if (diloco()) {
    s += fmt::format(" H{}", inner_steps);
    if (fragments > 1) s += fmt::format(" F{}", fragments);
    if (overlap > 0) s += fmt::format(" overlap {} mixing {:g}", overlap, mixing);
    if (!outer_comp.empty()) {
      s += " outer " + outer_comp;
      if (outer_fraction > 0) s += fmt::format(" {:g}%", outer_fraction * 100);
      if (outer_rotation > 0) s += fmt::format(" rotated (hadamard:{})", outer_rotation);
      if (outer_stochastic) s += " stochastic";
      if (outer_error_feedback) s += " +EF";
    }
    if (float(outer_lr) != 0.7f || float(outer_momentum) != 0.9f)
      s += fmt::format(" outer lr {:g} momentum {:g}", outer_lr, outer_momentum);
  }
  return s;
}

bool same_setting(const LinkSetting& a, const LinkSetting& b) {
  return covers(a, b) && a.ec == b.ec && a.sc == b.sc;
}

bool covers(const LinkSetting& m, const LinkSetting& p) {
  // The warm-up is a float in the engine's options and a double in the JSON: compare as floats.
  if (m.method != p.method || m.error_feedback != p.error_feedback || m.lep != p.lep ||
      (m.lep && float(m.lep_decay) != float(p.lep_decay)) ||
      m.stochastic != p.stochastic || float(m.warmup) != float(p.warmup))
    return false;
  if (m.diloco())  // floats in the engine's options, doubles in the JSON: compared as floats
    return m.inner_steps == p.inner_steps && m.fragments == p.fragments && m.overlap == p.overlap &&
           (m.overlap == 0 || float(m.mixing) == float(p.mixing)) && float(m.outer_lr) == float(p.outer_lr) &&
           float(m.outer_momentum) == float(p.outer_momentum) && m.outer_comp == p.outer_comp &&
           m.outer_stochastic == p.outer_stochastic && m.outer_rotation == p.outer_rotation &&
           std::abs(m.outer_fraction - p.outer_fraction) <= 1e-9 && m.outer_error_feedback == p.outer_error_feedback;
  if (m.method == "powersgd" && m.rank != p.rank) return false;
  if ((m.method == "topk" || m.method == "topk2") && std::abs(m.fraction - p.fraction) > 1e-9) return false;
  if (m.method == "adaptive" && std::abs(m.high_fraction - p.high_fraction) > 1e-9) return false;
  // A rotation changes what the codec drops; the lossless stage does not (same training).
  if (m.rotation != p.rotation) return false;
  // EC / SC compress a subset: a measurement without them bounds a plan with them.
  if (m.ec && !p.ec) return false;
  if (m.sc > 0 && (p.sc == 0 || p.sc > m.sc)) return false;
  return true;
}

namespace {

std::optional<LinkSetting> parse_setting(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  LinkSetting s;
  s.method = j.at("method").get<std::string>();
  s.rank = j.value("rank", 0);
  s.fraction = j.value("density", j.value("fraction", 0.0));
  if (s.method == "topk2" && s.fraction == 0) s.fraction = CompressorSpec{}.topk_density;
  s.stochastic = j.value("stochastic", false);
  // "hadamard" (the default block), "hadamard:B", or a block size.
  auto rotation = [](const nlohmann::json& r, const char* what) {
    if (r.is_null()) return 0;
    if (r.is_number_integer()) return r.get<int>();
    if (r.is_boolean()) return r.get<bool>() ? kDefaultRotationBlock : 0;
    return parse_rotation(r.get<std::string>(), what);
  };
  s.rotation = rotation(j.value("rotation", nlohmann::json()), "compressors.json rotation");
  s.high_fraction = j.value("high_fraction", kDefaultHighFraction);
  s.lossless = j.value("lossless", std::string());
  s.error_feedback = j.value("error_feedback", false);
  s.lep = j.value("lep", false);
  s.lep_decay = j.value("lep_decay", 1.0);
  s.ec = j.value("ec", false);
  s.sc = j.value("sc", 0);
  s.warmup = j.value("warmup", 0.0);
  s.inner_steps = j.value("inner_steps", 0);
  s.fragments = j.value("fragments", 1);
  s.overlap = j.value("overlap", 0);
  s.mixing = j.value("mixing", 0.5);
  s.outer_lr = j.value("outer_lr", 0.7);
  s.outer_momentum = j.value("outer_momentum", 0.9);
  s.outer_comp = j.value("outer_comp", std::string());
  s.outer_stochastic = j.value("outer_stochastic", false);
  s.outer_rotation = rotation(j.value("outer_rotation", nlohmann::json()), "compressors.json outer_rotation");
  s.outer_fraction = j.value("outer_fraction", 0.0);
  s.outer_error_feedback = j.value("outer_error_feedback", false);
  return s;
}

}  // namespace

LossCostTable LossCostTable::load(const std::string& path) {
  LossCostTable t;
  t.path_ = path;
  t.read(path, {"--compressors-json", "compressors.json", "python3 -m occtools compressors",
                "python3 -m occtools compressors --from-json FILE"});
  return t;
}

void LossCostTable::load_more(const std::string& path) {
  read(path, {"--diloco-json", "diloco-quality.json", "python3 -m occtools diloco-quality",
               "python3 -m occtools diloco-quality --from-json FILE"});
}

void LossCostTable::read(const std::string& path, const Source& source) {
  std::ifstream in(path);
  if (!in)
    throw UsageError(fmt::format("cannot open {} {}; run {} (it writes {}) or pass its path", source.flag,
                                 path, source.command, source.file));
  LossCostTable& t = *this;
  paths_.push_back(path);
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    for (LinkClass c : {LinkClass::Forward, LinkClass::Backward, LinkClass::DataParallel})
      for (const auto& e : j.at("link_costs").at(link_class_name(c))) {
        if (e.at("max_pct").is_null()) continue;
        MeasuredCost m;
        m.links[size_t(c)] = parse_setting(e.at("setting"));
        m.variant = e.at("variant").get<std::string>();
        m.max_pct = e.at("max_pct").get<double>(), m.mean_pct = e.at("mean_pct").get<double>();
        t.singles_[size_t(c)].push_back(m);
      }
    for (const auto& v : j.at("variants")) {
      if (!v.value("complete", false) || v.at("max_pct").is_null()) continue;
      MeasuredCost m;
      for (LinkClass c : {LinkClass::Forward, LinkClass::Backward, LinkClass::DataParallel})
        m.links[size_t(c)] = parse_setting(v.at("links").at(link_class_name(c)));
      m.variant = v.at("name").get<std::string>();
      m.max_pct = v.at("max_pct").get<double>(), m.mean_pct = v.at("mean_pct").get<double>();
      t.variants_.push_back(m);
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{} {} is not a {} of {} ({}); regenerate it with {}", source.flag,
                                 path, source.file, source.command, e.what(), source.report));
  }
}

std::vector<LinkSetting> LossCostTable::measured_settings(LinkClass c) const {
  std::vector<LinkSetting> out;
  auto add = [&](const MeasuredCost& m) {
    const auto& s = m.links[size_t(c)];
    if (s && std::none_of(out.begin(), out.end(), [&](const LinkSetting& o) { return same_setting(o, *s); }))
      out.push_back(*s);
  };
  for (const MeasuredCost& m : singles_[size_t(c)]) add(m);
  for (const MeasuredCost& m : variants_) add(m);
  return out;
}

std::array<std::optional<LinkSetting>, 3> LossCostTable::settings_of(const PlanConfig& cfg) {
  std::array<std::optional<LinkSetting>, 3> s;
  auto parameters = [](LinkSetting& l, const CompressorSpec& spec) {
    l.method = method_name(spec.method);
    if (spec.method == CompressionMethod::PowerSgd) l.rank = spec.rank;
    if (spec.method == CompressionMethod::Topk) l.fraction = spec.topk_fraction;
    if (spec.method == CompressionMethod::Topk2) l.fraction = spec.topk_density;
    if (method_is_adaptive(spec.method)) l.high_fraction = spec.high_fraction;
    l.stochastic = method_takes_block_options(spec.method) && spec.stochastic;
    l.rotation = method_takes_block_options(spec.method) ? spec.rotation : 0;
  };
  if (cfg.activation_comp.enabled) {
    LinkSetting l;
    parameters(l, cfg.activation_comp.spec());
    if (cfg.activation_comp.lossless != LosslessCoding::None) l.lossless = lossless_name(cfg.activation_comp.lossless);
    s[size_t(LinkClass::Forward)] = l;
  }
  if (cfg.cb.enabled && cfg.pp > 1) {
    LinkSetting l;
    parameters(l, cfg.cb.spec());
    l.lep = cfg.cb.lazy_error, l.ec = cfg.cb.epilogue_only;
    if (l.lep) l.lep_decay = cfg.cb.lep_decay;
    if (cfg.cb.lossless != LosslessCoding::None) l.lossless = lossless_name(cfg.cb.lossless);
    s[size_t(LinkClass::Backward)] = l;
  }
  if (cfg.diloco.enabled() && cfg.dp > 1) {
    LinkSetting l;
    l.method = "diloco";
    const DilocoConfig& d = cfg.diloco;
    l.inner_steps = d.inner_steps, l.fragments = d.fragments, l.overlap = d.overlap_steps, l.mixing = d.mixing;
    l.outer_lr = d.outer_lr, l.outer_momentum = d.outer_momentum;
    if (d.outer_comp) l.outer_comp = method_name(*d.outer_comp);
    l.outer_stochastic = d.outer_comp && method_is_block(*d.outer_comp) && d.outer_stochastic;
    if (d.outer_comp) {
      l.outer_rotation = method_is_block(*d.outer_comp) ? d.outer_rotation : 0;
      if (*d.outer_comp == CompressionMethod::Topk) l.outer_fraction = d.outer_topk_fraction;
      if (*d.outer_comp == CompressionMethod::Topk2) l.outer_fraction = d.outer_topk_density;
      l.outer_error_feedback = d.outer_error_feedback;
    }
    s[size_t(LinkClass::DataParallel)] = l;
  }
  if (cfg.grad_comp.enabled && cfg.dp > 1) {
    LinkSetting l;
    parameters(l, cfg.grad_comp.spec());
    l.error_feedback = cfg.grad_comp.error_feedback;
    l.warmup = cfg.grad_comp.warmup_fraction;
    const int k = cfg.grad_comp.selective_way;
    l.sc = k >= 1 && k < cfg.pp ? k : 0;
    s[size_t(LinkClass::DataParallel)] = l;
  }
  return s;
}

LossEstimate LossCostTable::estimate(const PlanConfig& cfg) const {
  const auto want = settings_of(cfg);
  LossEstimate e;
  if (std::none_of(want.begin(), want.end(), [](const auto& l) { return l.has_value(); })) {
    e.known = true, e.how = "no lossy compression";
    return e;
  }
  // 1. A measured variant with exactly this compression.
  for (const MeasuredCost& v : variants_) {
    bool same = true;
    for (size_t c = 0; c < 3; ++c)
      same = same && v.links[c].has_value() == want[c].has_value() && (!want[c] || same_setting(*v.links[c], *want[c]));
    if (same) {
      e.known = true, e.pct = std::max(0.0, v.max_pct);
      e.how = fmt::format("measured as variant {} (worst seed {:+.2f} %)", v.variant, v.max_pct);
      return e;
    }
  }
  // 2. A sum: a measured variant that compresses some of the links exactly as wanted (and leaves
  // the others alone), plus the other links' single measurements (the closest: exact first, then
  // covering). The variant that measures the most links together wins (a combination measured
  // is closer than a sum), then the lower cost; with none, the singles alone.
  auto singles_for = [&](const std::array<bool, 3>& done, LossEstimate& out) {
    for (size_t c = 0; c < 3; ++c) {
      if (!want[c] || done[c]) continue;
      const MeasuredCost* best = nullptr;
      for (const MeasuredCost& m : singles_[c]) {
        const LinkSetting& s = *m.links[c];
        if (!covers(s, *want[c])) continue;
        if (!best || (same_setting(s, *want[c]) && !same_setting(*best->links[c], *want[c])) ||
            (same_setting(s, *want[c]) == same_setting(*best->links[c], *want[c]) && m.max_pct < best->max_pct))
          best = &m;
      }
      if (!best) {
        out.known = false;
        out.how = fmt::format("{} {} was not measured", link_class_name(LinkClass(c)), want[c]->describe());
        return;
      }
      out.pct += std::max(0.0, best->max_pct);
      out.how += fmt::format("{}{} {:+.2f} % ({})", out.how.empty() ? "" : " + ", link_class_name(LinkClass(c)),
                             best->max_pct, best->variant);
    }
  };
  LossEstimate best;
  int best_links = -1;
  for (const MeasuredCost& v : variants_) {
    std::array<bool, 3> done{};
    int links = 0;
    bool fits = true;
    for (size_t c = 0; c < 3 && fits; ++c) {
      if (!v.links[c]) continue;
      fits = want[c] && same_setting(*v.links[c], *want[c]);
      done[c] = true, ++links;
    }
    if (!fits || links == 0) continue;
    LossEstimate part;
    part.known = true, part.pct = std::max(0.0, v.max_pct);
    part.how = fmt::format("variant {} {:+.2f} %", v.variant, v.max_pct);
    singles_for(done, part);
    if (part.known && (links > best_links || (links == best_links && part.pct < best.pct)))
      best = part, best_links = links;
  }
  if (best_links < 0) {
    best.known = true;
    singles_for({}, best);
    if (!best.known) return best;
  }
  best.how = "sum of per-link measurements (worst seed, costs assumed to add): " + best.how;
  return best;
}

}  // namespace occ::plan
