// CppUnit runner for the unit tests. Usage: tula-unit-tests [TEST_NAME_PREFIX...]
// Prints one line per test ("ok"/"FAIL" with the failure), then
// "unit: N passed, M failed". Exit status 0 only when every test passed.
#include <cppunit/Exception.h>
#include <cppunit/SourceLine.h>
#include <cppunit/TestFailure.h>
#include <cppunit/TestListener.h>
#include <cppunit/TestResult.h>
#include <cppunit/TestResultCollector.h>
#include <cppunit/TestRunner.h>
#include <cppunit/extensions/TestFactoryRegistry.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

// Prints each test's outcome as it finishes and counts them.
class LineListener : public CppUnit::TestListener {
public:
    void startTest(CppUnit::Test*) override { failed_ = false; }
    void addFailure(const CppUnit::TestFailure& f) override {
        failed_ = true;
        const auto* e = f.thrownException();
        std::printf("FAIL %s\n     %s:%ld: %s\n", f.failedTestName().c_str(),
                    f.sourceLine().fileName().c_str(), static_cast<long>(f.sourceLine().lineNumber()),
                    e ? e->message().details().c_str() : "");
        if (e) std::printf("     %s\n", e->what());
    }
    void endTest(CppUnit::Test* t) override {
        if (failed_) ++n_failed;
        else { ++n_passed; std::printf("ok   %s\n", t->getName().c_str()); }
        std::fflush(stdout);
    }
    int n_passed = 0, n_failed = 0;
private:
    bool failed_ = false;
};

// Adds the tests whose name starts with one of `prefixes` (all when empty).
void collect(CppUnit::Test* t, const std::vector<std::string>& prefixes, CppUnit::TestRunner& runner) {
    if (t->getChildTestCount() == 0) {
        bool take = prefixes.empty();
        for (const auto& p : prefixes) take = take || t->getName().rfind(p, 0) == 0;
        if (take) runner.addTest(t);
        return;
    }
    for (int i = 0; i < t->getChildTestCount(); ++i) collect(t->getChildTestAt(i), prefixes, runner);
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> prefixes(argv + 1, argv + argc);
    CppUnit::Test* all = CppUnit::TestFactoryRegistry::getRegistry().makeTest();
    CppUnit::TestRunner runner;
    collect(all, prefixes, runner);
    CppUnit::TestResult result;
    LineListener listener;
    result.addListener(&listener);
    runner.run(result);
    std::printf("unit: %d passed, %d failed\n", listener.n_passed, listener.n_failed);
    return listener.n_failed == 0 && listener.n_passed > 0 ? 0 : 1;
}
