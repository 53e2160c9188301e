// The timeout table and its verdict (see collective_report.h).
#include "trace/collective_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>

namespace ddpx::trace {
namespace {

bool finished(const Entry& e) { return e.state == State::kDone; }

const Entry* find_seq(const Snapshot& s, uint64_t seq) {
  for (const Entry& e : s.entries) {
    if (e.seq == seq) return &e;
  }
  return nullptr;
}

uint64_t last_seq(const Snapshot& s) { return s.entries.empty() ? 0 : s.entries.back().seq; }

const Entry* last_done(const Snapshot& s) {
  for (auto it = s.entries.rbegin(); it != s.entries.rend(); ++it) {
    if (finished(*it)) return &*it;
  }
  return nullptr;
}

const Entry* first_waiting(const Snapshot& s) {
  for (const Entry& e : s.entries) {
    if (!finished(e)) return &e;
  }
  return nullptr;
}

std::string describe(const Entry* e) {
  return e ? fmt::format("seq {} ({})", e->seq, e->sig.text()) : std::string("no collective");
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

// A rank's process state; "other node" for a copy received from another node (its pid is not
// this host's).
std::string state_of(const Snapshot& s) { return s.remote ? "other node" : process_state(s.pid); }

// A note on a rank's process when it says more than "running".
std::string process_note(const Snapshot& s) {
  std::string state = state_of(s);
  if (state == "other node") return "";
  return state == "running" ? "" : " (process " + state + ")";
}

std::string mismatch(const std::vector<Snapshot>& ranks) {
  std::map<uint64_t, std::vector<std::pair<int, const Entry*>>> by_seq;
  for (const Snapshot& s : ranks) {
    for (const Entry& e : s.entries) by_seq[e.seq].emplace_back(s.rank, &e);
  }
  for (const auto& [seq, entries] : by_seq) {
    const auto& first = entries[0].second->sig;  // clang < 16 cannot capture a binding
    bool same = std::all_of(entries.begin(), entries.end(),
                            [&first](const auto& p) { return p.second->sig == first; });
    if (same) continue;
    std::string text = fmt::format("mismatched collectives at seq {}:", seq);
    for (size_t i = 0; i < entries.size(); ++i) {
      text += fmt::format("{} rank {} {}", i ? "," : "", entries[i].first,
                          entries[i].second->sig.text());
    }
    return text;
  }
  return "";
}

}  // namespace

int64_t realtime_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string process_state(int pid) {
  if (pid <= 0) return "gone";
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return "gone";
  // The state follows the command name, which is in parentheses and may contain spaces.
  size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return "running";
  switch (line[close + 2]) {
    case 'T':
    case 't':
      return "stopped";
    case 'Z':
      return "zombie";
    case 'X':
      return "gone";
    default:
      return "running";
  }
}

std::string verdict(const std::vector<Snapshot>& ranks, int world_size, bool this_node_only) {
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    if (std::none_of(ranks.begin(), ranks.end(), [&](const Snapshot& s) { return s.rank == r; }))
      missing.push_back(r);
  }
  std::string note =
      missing.empty() ? "" : fmt::format("; no record of rank(s) {}", ranks_text(missing));
  if (ranks.empty()) return "no collective record of any rank" + note;

  // Point-to-point transfers (a pipeline's) differ from rank to rank by design, and so do the
  // collectives of sub-groups (a tensor group's on a pipeline's stages), so the records cannot be
  // lined up by sequence number: name the processes that are not running, if any.
  auto any_entry = [&ranks](bool (*test)(const Entry&)) {
    return std::any_of(ranks.begin(), ranks.end(), [test](const Snapshot& s) {
      return std::any_of(s.entries.begin(), s.entries.end(), test);
    });
  };
  const bool p2p =
      any_entry([](const Entry& e) { return e.sig.op == "send" || e.sig.op == "recv"; });
  const bool sub_groups = any_entry([](const Entry& e) { return !e.group.empty(); });
  if (p2p || sub_groups) {
    std::string states;
    for (const Snapshot& s : ranks) {
      const std::string state = state_of(s);
      if (state == "running" || state == "other node") continue;
      states += fmt::format("{}rank {} (process {})", states.empty() ? "" : ", ", s.rank, state);
    }
    return fmt::format("the ranks {}, so their records do not line up by seq; {}{}",
                       p2p ? "send and receive point to point (a pipeline's stages)"
                           : "call collectives in sub-groups (tensor parallelism)",
                       states.empty() ? "the rank named as failed is the likely cause"
                                      : "not running: " + states +
                                            "; the rank named as failed is the likely cause",
                       note);
  }

  std::string bad = mismatch(ranks);
  if (!bad.empty()) return bad + note;

  uint64_t lowest = UINT64_MAX, highest = 0;
  for (const Snapshot& s : ranks) {
    lowest = std::min(lowest, last_seq(s));
    highest = std::max(highest, last_seq(s));
  }
  if (lowest < highest) {
    // Behind: the ranks that started fewer collectives than the others.
    std::string text;
    for (const Snapshot& s : ranks) {
      if (last_seq(s) != lowest) continue;
      const Entry* waited = nullptr;
      for (const Snapshot& o : ranks) {
        if (last_seq(o) == lowest) continue;
        const Entry* w = first_waiting(o);
        if (w && (!waited || w->seq < waited->seq)) waited = w;
      }
      if (!text.empty()) text += "; ";
      text += fmt::format(
          "rank {} is behind{}: last completed {}, others {}", s.rank, process_note(s),
          describe(last_done(s)),
          waited ? "wait in " + describe(waited) : fmt::format("reached seq {}", highest));
    }
    return text + note;
  }
  // Every rank started the same collectives: is one of them stopped or gone inside the last?
  const Entry* waiting = nullptr;
  for (const Snapshot& s : ranks) {
    const Entry* w = first_waiting(s);
    if (w && (!waiting || w->seq < waiting->seq)) waiting = w;
  }
  if (!waiting) {
    return fmt::format("every rank completed {}; nothing is pending{}",
                       describe(ranks[0].entries.empty() ? nullptr : &ranks[0].entries.back()),
                       note);
  }
  // A rank that gave up on it (failed: its timeout) was waiting, not behind. Of the others, a
  // stopped process is the likeliest culprit, then one that is gone.
  const Snapshot* suspect = nullptr;
  std::string suspect_state;
  for (const Snapshot& s : ranks) {
    const Entry* e = find_seq(s, waiting->seq);
    if (e && e->state == State::kFailed) continue;
    std::string state = state_of(s);
    if (state == "running" || state == "other node") continue;
    if (!suspect || (state == "stopped" && suspect_state != "stopped")) {
      suspect = &s;
      suspect_state = state;
    }
  }
  if (suspect) {
    return fmt::format("rank {} is behind (process {}) inside {}; the others wait in it{}",
                       suspect->rank, suspect_state, describe(waiting), note);
  }
  if (!missing.empty()) {
    return fmt::format("rank(s) {} are behind: no record of them, the others wait in {}",
                       ranks_text(missing), describe(waiting));
  }
  if (this_node_only) {
    return fmt::format(
        "every rank of this node waits in {}; the job's other ranks run on other nodes and have "
        "no record here: the rank named as failed (or its node's log) is the likely cause",
        describe(waiting));
  }
  return fmt::format(
      "no rank is behind by the record: every rank waits in {}; the transport "
      "stalled or a rank is stuck inside it",
      describe(waiting));
}

Report make_report(std::vector<Snapshot> ranks, int world_size, int64_t now_ns, int rows_per_rank,
                   bool this_node_only) {
  std::sort(ranks.begin(), ranks.end(),
            [](const Snapshot& a, const Snapshot& b) { return a.rank < b.rank; });
  Report report;
  auto seconds = [](int64_t ns) { return static_cast<double>(ns) / 1e9; };
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"rank", "pid", "process", "seq", "collective", "started", "state"});
  for (const Snapshot& s : ranks) {
    const std::string process = state_of(s);
    if (s.entries.empty()) {
      rows.push_back(
          {std::to_string(s.rank), std::to_string(s.pid), process, "-", "(none yet)", "", ""});
    }
    size_t first = s.entries.size() > static_cast<size_t>(rows_per_rank)
                       ? s.entries.size() - rows_per_rank
                       : 0;
    for (size_t i = first; i < s.entries.size(); ++i) {
      const Entry& e = s.entries[i];
      std::string state;
      if (e.state == State::kDone) {
        state = fmt::format("done in {:.3f}s", seconds(e.end_ns - e.start_ns));
      } else if (e.state == State::kFailed) {
        state = fmt::format("FAILED after {:.1f}s", seconds(e.end_ns - e.start_ns));
      } else {
        state = fmt::format("WAITING {:.1f}s", seconds(now_ns - e.start_ns));
      }
      rows.push_back({std::to_string(s.rank), std::to_string(s.pid), process, std::to_string(e.seq),
                      e.sig.text(), fmt::format("{:.1f}s ago", seconds(now_ns - e.start_ns)),
                      state});
    }
  }
  for (int r = 0; r < world_size; ++r) {
    if (std::none_of(ranks.begin(), ranks.end(), [&](const Snapshot& s) { return s.rank == r; }))
      rows.push_back({std::to_string(r), "-", "-", "-", "(no record)", "", ""});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string line = i == 0 ? "# " : "  ";
    for (size_t c = 0; c < rows[i].size(); ++c) {
      line += rows[i][c];
      if (c + 1 < rows[i].size()) line += std::string(width[c] - rows[i][c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    report.table += line + "\n";
  }
  report.verdict = verdict(ranks, world_size, this_node_only);
  return report;
}

}  // namespace ddpx::trace
