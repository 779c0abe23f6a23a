// libtula: the set of profile databases a plan reads (load_profiles): every database in
// order, a later one's workload rows overriding an earlier one's, a database that cannot be
// read skipped with a warning. See db.hpp.
#include "db/sqlite.hpp"

namespace tula {

std::optional<Workload> ProfileSet::find(const std::string& name) const {
    for (const auto& w : workloads)
        if (w.name == name) return w;
    return std::nullopt;
}

std::vector<ComputeSample> ProfileSet::compute_for(const std::string& workload) const {
    std::vector<ComputeSample> out;
    for (const auto& c : compute)
        if (c.workload == workload) out.push_back(c);
    return out;
}

ProfileSet load_profiles(const std::vector<std::string>& paths, std::vector<std::string>* warnings) {
    return load_profiles(paths, warnings, "");
}

ProfileSet load_profiles(const std::vector<std::string>& paths, std::vector<std::string>* warnings,
                         const std::string& workload, std::vector<RunRecord>* runs,
                         std::vector<RunRecord>* other_runs) {
    ProfileSet set;
    std::map<std::string, size_t> index;  // workload name -> position in set.workloads
    for (const auto& p : paths) {
        if (p.empty()) continue;
        struct stat st;
        if (::stat(p.c_str(), &st) != 0 && errno == ENOENT) continue;  // not created yet: fine
        std::optional<ProfileDb> opened;
        try {
            opened.emplace(ProfileDb::open(p, ProfileDb::Mode::ReadOnly));
            const ProfileDb& db = *opened;
            std::vector<Workload> w = db.workloads();
            std::vector<ComputeSample> c = db.compute_samples(workload);  // "" = every workload's
            std::vector<AllreduceSample> a = db.allreduce_samples();
            for (auto& x : w) {
                auto it = index.find(x.name);
                if (it == index.end()) {
                    index[x.name] = set.workloads.size();
                    set.workloads.push_back(std::move(x));
                } else {
                    set.workloads[it->second] = std::move(x);
                }
            }
            // moved, not copied: a site database may hold many workloads' rows
            if (set.compute.empty()) {
                set.compute = std::move(c);
            } else {
                set.compute.insert(set.compute.end(), std::make_move_iterator(c.begin()),
                                   std::make_move_iterator(c.end()));
            }
            set.allreduce.insert(set.allreduce.end(), std::make_move_iterator(a.begin()),
                                 std::make_move_iterator(a.end()));
        } catch (const std::exception& e) {
            if (warnings) warnings->push_back(std::string(e.what()) + " (skipped)");
        }
        if (runs && opened) {
            try {
                std::vector<RunRecord> r = opened->runs(workload);
                runs->insert(runs->end(), std::make_move_iterator(r.begin()), std::make_move_iterator(r.end()));
            } catch (const std::exception&) {
                // runs that cannot be read: the plan goes on without them (no warning)
            }
        }
        if (other_runs && opened && !workload.empty()) {
            try {
                for (RunRecord& r : opened->runs("", false))
                    if (r.workload != workload) other_runs->push_back(std::move(r));
            } catch (const std::exception&) {
                // as above
            }
        }
    }
    return set;
}

}  // namespace tula
