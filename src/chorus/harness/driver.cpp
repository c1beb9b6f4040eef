// The simulator main of every chorus build (harness/replay.py): one Verilated model,
// two modes.
//
//  --chorus-record FILE   Run 1, untrusted: cocotb drives the design (the candidate's
//                         stimulus runs in this process through VPI). Before every
//                         evaluation of the model the top-level inputs are compared with
//                         the last recorded values and each change is written to FILE:
//                         the inputs the design really saw, with their simulation time and
//                         their order relative to every other evaluation (a clock edge and
//                         the data written after it are two steps). No coverage is written
//                         unless --chorus-coverage is given (tests compare both runs).
//  --chorus-replay FILE   Run 2, trusted: no VPI start-up, so no Python and no candidate
//                         code; applies the steps of FILE (checked and rewritten by the
//                         scorer) in order and writes coverage (+verilator+coverage+file+).
//
// The scheduling loop of the record mode follows cocotb's share/lib/verilator/verilator.cpp
// (BSD-3-Clause, cocotb contributors) so that a candidate sees the simulator cocotb's
// runner would build.
//
// Built with -DCHORUS_REPLAY_ONLY (SystemVerilog testbench answers, harness/svtb.py: Run 1
// is the candidate's own Verilated testbench, which records through a generated
// SystemVerilog monitor) only the replay mode is compiled: no VPI, no cocotb. There
// --chorus-time-ps says the trace's times are picoseconds, converted to the model's
// time precision.
//
// Trace format (text): "chorus-inputs 1 <ports>", then one line per evaluation whose
// inputs changed, "<time> <port>:<hex> ..." (the first line: every input), then
// "end <time>"; written only when the run ends normally, "overflow" alone when it
// grew past --chorus-record-limit bytes. <port> indexes chorus_ports.h's table (inputs
// only).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "Vtop.h"
#include "verilated.h"
#ifndef CHORUS_REPLAY_ONLY
#include "verilated_vpi.h"
#endif
#include "chorus_ports.h"  // generated per design: chorus_ports, chorus_get, chorus_set

static vluint64_t main_time = 0;
// the trace's time unit in model time units (--chorus-time-ps: picoseconds); a model of
// a coarser precision rounds times down, as its own delays are
static double time_scale = 1.0;

// a --timing model reads the context's time, a model without timing sc_time_stamp()
static void set_time(vluint64_t now) {
    main_time = now;
    Verilated::threadContextp()->time(now);
}
// the trace is kept in memory and written once, at the normal end (O_TRUNC): bytes
// written into the file before that do not survive, and a run that never reaches its
// end leaves the file as the scorer made it (empty)
static const char* record_path = nullptr;
static std::string record;
static size_t record_limit = 32u << 20;
static bool record_overflow = false;
static bool record_coverage = false;
static std::vector<uint32_t> last_inputs;  // chorus_words words per port, in port order

double sc_time_stamp() { return main_time; }

extern "C" {
void vlog_startup_routines_bootstrap(void);
}

#ifndef CHORUS_REPLAY_ONLY
// -- record ---------------------------------------------------------------------------
static void append_hex(const uint32_t* words, int count) {
    char chunk[16];
    int top = count - 1;
    while (top > 0 && words[top] == 0) top--;
    snprintf(chunk, sizeof chunk, "%x", words[top]);
    record += chunk;
    for (int k = top - 1; k >= 0; k--) {
        snprintf(chunk, sizeof chunk, "%08x", words[k]);
        record += chunk;
    }
}

static bool first_step = true;

static void record_step(Vtop* top) {
    if (!record_path || record_overflow) return;
    uint32_t words[CHORUS_MAX_WORDS];
    char chunk[32];
    bool started = false;
    for (int i = 0; i < CHORUS_PORT_COUNT; i++) {
        const int count = chorus_ports[i].words;
        uint32_t* last = &last_inputs[chorus_ports[i].offset];
        chorus_get(top, i, words);
        if (!first_step && memcmp(words, last, count * 4) == 0) continue;
        if (!started) {
            snprintf(chunk, sizeof chunk, "%llu", (unsigned long long)main_time);
            record += chunk;
        }
        started = true;
        snprintf(chunk, sizeof chunk, " %d:", i);
        record += chunk;
        append_hex(words, count);
        memcpy(last, words, count * 4);
    }
    first_step = false;
    if (started) record += '\n';
    if (record.size() > record_limit) record_overflow = true;
}

static void write_record() {
    if (!record_path) return;
    FILE* out = fopen(record_path, "w");
    if (!out) { fprintf(stderr, "chorus: cannot write %s\n", record_path); return; }
    char chunk[48];
    snprintf(chunk, sizeof chunk, record_overflow ? "overflow\n" : "end %llu\n", (unsigned long long)main_time);
    if (!record_overflow) fwrite(record.data(), 1, record.size(), out);
    fputs(chunk, out);
    fclose(out);
}

static inline bool settle_value_callbacks() {
    bool called, again;
    called = again = VerilatedVpi::callValueCbs();
    while (again) again = VerilatedVpi::callValueCbs();
    return called;
}

static void wrap_up() {
    VerilatedVpi::callCbs(cbEndOfSimulation);
    if (record_coverage) VerilatedCov::write();
}

static void eval_step(Vtop* top) {
    record_step(top);
    top->eval_step();
}

static int run_cocotb(Vtop* top) {
    vlog_startup_routines_bootstrap();
    Verilated::addExitCb([](void*) { wrap_up(); }, nullptr);
    VerilatedVpi::callCbs(cbStartOfSimulation);
    settle_value_callbacks();
    while (!Verilated::gotFinish()) {
        do {
            do {
                eval_step(top);
                VerilatedVpi::clearEvalNeeded();
                VerilatedVpi::doInertialPuts();
                settle_value_callbacks();
            } while (VerilatedVpi::evalNeeded());
            VerilatedVpi::callCbs(cbReadWriteSynch);
            VerilatedVpi::doInertialPuts();
            settle_value_callbacks();
        } while (VerilatedVpi::evalNeeded());
        top->eval_end_step();
        VerilatedVpi::callCbs(cbReadOnlySynch);
        const vluint64_t none = static_cast<vluint64_t>(~0ULL);
        vluint64_t next_cocotb = VerilatedVpi::cbNextDeadline();
        vluint64_t next_timing = top->eventsPending() ? top->nextTimeSlot() : none;
        vluint64_t next_time = std::min(next_cocotb, next_timing);
        if (next_time == none) break;
        set_time(next_time);
        VerilatedVpi::callCbs(cbNextSimTime);
        settle_value_callbacks();
        VerilatedVpi::callTimedCbs();
        settle_value_callbacks();
    }
    top->final();
    wrap_up();
    write_record();
    return Verilated::threadContextp()->errorCount() > 0 ? 1 : 0;
}
#endif  // CHORUS_REPLAY_ONLY

// -- replay ---------------------------------------------------------------------------
static bool parse_hex(const char* text, size_t length, uint32_t* words, int count) {
    memset(words, 0, count * 4);
    if (length == 0 || length > (size_t)count * 8) return false;
    for (size_t n = 0; n < length; n++) {
        const char c = text[length - 1 - n];
        int digit;
        if (c >= '0' && c <= '9') digit = c - '0';
        else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
        else return false;
        words[n / 8] |= (uint32_t)digit << (4 * (n % 8));
    }
    return true;
}

// the design's own timed events (a --timing build) up to, not including, `until`
static bool evaluated = false;

static void advance_to(Vtop* top, vluint64_t until) {
    if (evaluated) top->eval_end_step();
    while (!Verilated::gotFinish() && top->eventsPending() && top->nextTimeSlot() < until) {
        set_time(top->nextTimeSlot());
        top->eval_step();
        top->eval_end_step();
    }
    set_time(until);
}

static void evaluate_at_start(Vtop* top) {
    top->eval_step();
    evaluated = true;
}

// apply one line "<time> <port>:<hex> ..." and evaluate; false for a malformed line
static bool replay_line(Vtop* top, char* line) {
    char* cursor = line;
    char* end = nullptr;
    const unsigned long long time = (unsigned long long)(strtoull(cursor, &end, 10) * time_scale);
    if (end == cursor || time < main_time) return false;
    // Run 1 evaluated the model at time 0 whatever its inputs: with none changed from
    // their initial 0 before a later time, so does the replay
    if (!evaluated && time > 0) evaluate_at_start(top);
    if (time > main_time) advance_to(top, time);
    uint32_t words[CHORUS_MAX_WORDS];
    cursor = end;
    while (*cursor == ' ') {
        cursor++;
        const long port = strtol(cursor, &end, 10);
        if (end == cursor || *end != ':' || port < 0 || port >= CHORUS_PORT_COUNT) return false;
        cursor = end + 1;
        size_t length = strspn(cursor, "0123456789abcdef");
        if (!parse_hex(cursor, length, words, chorus_ports[port].words)) return false;
        chorus_set(top, (int)port, words);
        cursor += length;
    }
    if (*cursor != '\n' && *cursor != '\0') return false;
    top->eval_step();
    evaluated = true;
    return true;
}

static int run_replay(Vtop* top, const char* path) {
    FILE* in = fopen(path, "r");
    if (!in) { fprintf(stderr, "chorus replay: cannot open %s\n", path); return 2; }
    char* line = nullptr;
    size_t capacity = 0;
    int status = 0;
    bool header = true;
    while (!Verilated::gotFinish() && getline(&line, &capacity, in) >= 0) {
        if (header) {
            int version = 0, ports = -1;
            if (sscanf(line, "chorus-inputs %d %d", &version, &ports) != 2 || version != 1 ||
                ports != CHORUS_PORT_COUNT) { status = 3; break; }
            header = false;
        } else if (strncmp(line, "end", 3) == 0) {
            break;
        } else if (!replay_line(top, line)) {
            fprintf(stderr, "chorus replay: malformed step: %.80s\n", line);
            status = 3;
            break;
        }
    }
    free(line);
    fclose(in);
    if (!evaluated && status == 0) evaluate_at_start(top);
    if (evaluated) top->eval_end_step();
    top->final();
    VerilatedCov::write();
    return status;
}

int main(int argc, char** argv) {
    const char* replay_path = nullptr;
    bool time_ps = false;
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        if (arg == "--chorus-record" && i + 1 < argc) record_path = argv[++i];
        else if (arg == "--chorus-replay" && i + 1 < argc) replay_path = argv[++i];
        else if (arg == "--chorus-record-limit" && i + 1 < argc) record_limit = strtoull(argv[++i], nullptr, 10);
        else if (arg == "--chorus-coverage") record_coverage = true;
        else if (arg == "--chorus-time-ps") time_ps = true;
    }
    Verilated::commandArgs(argc, argv);
    std::unique_ptr<Vtop> top(new Vtop(""));
    Verilated::fatalOnVpiError(false);
    if (time_ps) {
        time_scale = 1.0;
        for (int exponent = Verilated::threadContextp()->timeprecision(); exponent < -12; exponent++) time_scale *= 10;
        for (int exponent = Verilated::threadContextp()->timeprecision(); exponent > -12; exponent--) time_scale /= 10;
    }
    if (replay_path) return run_replay(top.get(), replay_path);
#ifdef CHORUS_REPLAY_ONLY
    fprintf(stderr, "chorus: this build only replays (--chorus-replay FILE)\n");
    return 2;
#else
    last_inputs.assign(CHORUS_TOTAL_WORDS, 0);
    if (record_path) {
        char header[48];
        snprintf(header, sizeof header, "chorus-inputs 1 %d\n", CHORUS_PORT_COUNT);
        record = header;
    }
    return run_cocotb(top.get());
#endif
}
