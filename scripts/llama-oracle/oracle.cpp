// llama-oracle: llama.cpp as a reference oracle for stoker's parity fixtures.
//
// Built by scripts/build-llama-cpp.sh against the libllama it builds; run by
// scripts/make_parity_fixtures.sh. Never run in CI. Every mode prints one JSON
// object on stdout (llama.cpp's own log goes to stderr).
//
//   llama-oracle tokenize --model M (--text-file F | --text S) [--special]
//       The token ids of the text under llama.cpp's tokenizer. add_special is
//       always true, which lets the vocabulary decide: a BOS (or EOS) is added
//       only when the GGUF says so (tokenizer.ggml.add_bos_token); SmolLM2's
//       GGUF says not, so no BOS is added. --special parses special tokens
//       such as <|im_start|> in the text (parse_special=true).
//
//   llama-oracle score --model M --text-file F [--top K]
//       Teacher-forced scoring: tokenizes F as `tokenize` does (no special
//       parsing), decodes all n tokens in one llama_batch (one sequence,
//       positions 0..n-1, logits requested for every position, n_ctx = n_batch
//       = n_ubatch >= n), and for each position i gives the distribution over
//       the token after tokens[0..=i]: the top K (default 64) token ids by
//       logit (ties to the lower id) with their natural-log probabilities
//       after a log-softmax computed in double precision over the full
//       vocabulary, and `rest`, the probability mass of all other tokens
//       (summed in double). Log-probs are printed with 6 decimals, `rest`
//       with 6 significant digits.
//
//   llama-oracle generate --model M --n N --prompt-ids 1,2,3 [--prompt-ids ...]
//       Greedy generation (temperature 0: the argmax of the logits, ties to
//       the lower id) of up to N tokens for each prompt, each prompt in a fresh
//       KV cache. The prompt is decoded in one batch; each generated token is
//       then fed back one at a time. Generation stops after N tokens or after
//       an end-of-generation token (llama_vocab_is_eog), which is included.
//
//   llama-oracle kld --base M1 --test M2 --text-file F
//       KL(base || test) per position over the full vocabulary (double
//       precision), both models scored teacher-forced on the same tokens (those
//       of M1's tokenizer; the vocabularies must match). Prints the mean over
//       all n positions (llama-perplexity --kl-divergence averages over the
//       second half of each chunk instead), its max, and the share of
//       positions where the two argmaxes agree.
//
// Common options: --threads T (default 2). Context settings are llama.cpp's
// defaults otherwise (f16 KV cache, flash attention "auto"); the JSON says so.

#include "llama.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string & msg) {
    fprintf(stderr, "llama-oracle: %s\n", msg.c_str());
    exit(1);
}

struct Args {
    std::string mode;
    std::string model, base, test, text, text_file;
    bool text_given = false;
    bool special = false;
    int top = 64;
    int n = 32;
    int threads = 2;
    std::vector<std::vector<llama_token>> prompts;
};

std::vector<llama_token> parse_ids(const std::string & s) {
    std::vector<llama_token> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (!item.empty()) out.push_back((llama_token) std::stol(item));
    }
    return out;
}

Args parse_args(int argc, char ** argv) {
    if (argc < 2) die("usage: llama-oracle tokenize|score|generate|kld [options] (see oracle.cpp)");
    Args a;
    a.mode = argv[1];
    for (int i = 2; i < argc; i++) {
        std::string k = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) die("missing value for " + k);
            return argv[++i];
        };
        if (k == "--model") a.model = val();
        else if (k == "--base") a.base = val();
        else if (k == "--test") a.test = val();
        else if (k == "--text") { a.text = val(); a.text_given = true; }
        else if (k == "--text-file") a.text_file = val();
        else if (k == "--special") a.special = true;
        else if (k == "--top") a.top = std::stoi(val());
        else if (k == "--n") a.n = std::stoi(val());
        else if (k == "--threads") a.threads = std::stoi(val());
        else if (k == "--prompt-ids") a.prompts.push_back(parse_ids(val()));
        else die("unknown option " + k);
    }
    if (!a.text_file.empty()) {
        std::ifstream f(a.text_file, std::ios::binary);
        if (!f) die("cannot read " + a.text_file);
        std::stringstream ss;
        ss << f.rdbuf();
        a.text = ss.str();
        a.text_given = true;
    }
    return a;
}

std::string json_str(const std::string & s) {
    std::string o = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"': o += "\\\""; break;
            case '\\': o += "\\\\"; break;
            case '\n': o += "\\n"; break;
            case '\r': o += "\\r"; break;
            case '\t': o += "\\t"; break;
            default:
                if (c < 0x20) {
                    char b[8];
                    snprintf(b, sizeof b, "\\u%04x", c);
                    o += b;
                } else {
                    o += (char) c;
                }
        }
    }
    return o + "\"";
}

std::string ids_json(const std::vector<llama_token> & ids) {
    std::string o = "[";
    for (size_t i = 0; i < ids.size(); i++) {
        if (i) o += ",";
        o += std::to_string(ids[i]);
    }
    return o + "]";
}

llama_model * load_model(const std::string & path) {
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.progress_callback = [](float, void *) { return true; };  // no progress dots
    // ORACLE_EXTRA_BUFTS=0: no repacked weight layouts (CPU_REPACK, AMX), so
    // every matmul runs ggml's portable vec_dot kernels, the same on every x86
    // machine. The default keeps llama.cpp's own default (on).
    if (const char * e = getenv("ORACLE_EXTRA_BUFTS"); e && std::string(e) == "0") {
        mp.use_extra_bufts = false;
    }
    llama_model * m = llama_model_load_from_file(path.c_str(), mp);
    if (!m) die("cannot load " + path);
    return m;
}

llama_context * make_context(llama_model * model, uint32_t n_ctx, int threads) {
    llama_context_params cp = llama_context_default_params();
    n_ctx = std::max<uint32_t>(256, (n_ctx + 255) / 256 * 256);
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx;
    cp.n_ubatch = n_ctx;
    cp.n_seq_max = 1;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) die("cannot create a context");
    return ctx;
}

std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & text, bool special) {
    int n = -llama_tokenize(vocab, text.data(), (int32_t) text.size(), nullptr, 0, true, special);
    std::vector<llama_token> out(std::max(n, 0));
    int got = llama_tokenize(vocab, text.data(), (int32_t) text.size(), out.data(), (int32_t) out.size(), true, special);
    if (got < 0) die("tokenization failed");
    out.resize(got);
    return out;
}

// Decodes `tokens` for sequence 0 starting at `pos0`; logits for every token
// when `all_logits`, else only for the last.
void decode(llama_context * ctx, const std::vector<llama_token> & tokens, int pos0, bool all_logits) {
    llama_batch b = llama_batch_init((int32_t) tokens.size(), 0, 1);
    for (size_t i = 0; i < tokens.size(); i++) {
        b.token[i] = tokens[i];
        b.pos[i] = pos0 + (llama_pos) i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = all_logits || i + 1 == tokens.size();
    }
    b.n_tokens = (int32_t) tokens.size();
    int rc = llama_decode(ctx, b);
    llama_batch_free(b);
    if (rc != 0) die("llama_decode failed: " + std::to_string(rc));
}

// All positions' logits, n x n_vocab, copied out of the context.
std::vector<float> score_logits(llama_model * model, const std::vector<llama_token> & tokens, int threads) {
    llama_context * ctx = make_context(model, (uint32_t) tokens.size(), threads);
    decode(ctx, tokens, 0, true);
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::vector<float> out((size_t) tokens.size() * nv);
    for (size_t i = 0; i < tokens.size(); i++) {
        const float * l = llama_get_logits_ith(ctx, (int32_t) i);
        if (!l) die("no logits for position " + std::to_string(i));
        std::copy(l, l + nv, out.begin() + (ptrdiff_t) (i * nv));
    }
    llama_free(ctx);
    return out;
}

// log-softmax in double over the full row.
void log_softmax(const float * l, int nv, std::vector<double> & out) {
    out.resize(nv);
    double mx = -INFINITY;
    for (int j = 0; j < nv; j++) mx = std::max(mx, (double) l[j]);
    double s = 0.0;
    for (int j = 0; j < nv; j++) s += std::exp((double) l[j] - mx);
    const double lse = mx + std::log(s);
    for (int j = 0; j < nv; j++) out[j] = (double) l[j] - lse;
}

int argmax(const float * l, int nv) {
    int best = 0;
    for (int j = 1; j < nv; j++) {
        if (l[j] > l[best]) best = j;
    }
    return best;
}

const char * settings_json() {
    const char * e = getenv("ORACLE_EXTRA_BUFTS");
    if (e && std::string(e) == "0") {
        return "{\"kv_cache\":\"f16\",\"flash_attn\":\"auto\",\"n_seq\":1,\"one_batch\":true,\"add_special\":true,\"extra_bufts\":false}";
    }
    return "{\"kv_cache\":\"f16\",\"flash_attn\":\"auto\",\"n_seq\":1,\"one_batch\":true,\"add_special\":true}";
}

int run_tokenize(const Args & a) {
    if (a.model.empty() || !a.text_given) die("tokenize needs --model and --text/--text-file");
    llama_model * model = load_model(a.model);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    auto ids = tokenize(vocab, a.text, a.special);
    printf("{\"add_bos\":%s,\"parse_special\":%s,\"tokens\":%s}\n",
           llama_vocab_get_add_bos(vocab) ? "true" : "false", a.special ? "true" : "false", ids_json(ids).c_str());
    llama_model_free(model);
    return 0;
}

int run_score(const Args & a) {
    if (a.model.empty() || !a.text_given) die("score needs --model and --text-file");
    llama_model * model = load_model(a.model);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int nv = llama_vocab_n_tokens(vocab);
    auto ids = tokenize(vocab, a.text, false);
    if (ids.empty()) die("empty text");
    auto logits = score_logits(model, ids, a.threads);
    const int k = std::min(a.top, nv);

    std::string o;
    o += "{\"n_vocab\":" + std::to_string(nv);
    o += ",\"add_bos\":" + std::string(llama_vocab_get_add_bos(vocab) ? "true" : "false");
    o += ",\"top_k\":" + std::to_string(k);
    o += ",\"settings\":" + std::string(settings_json());
    o += ",\"tokens\":" + ids_json(ids);
    o += ",\"positions\":[";
    std::vector<double> lp;
    std::vector<int> idx(nv);
    double nll = 0.0;
    for (size_t i = 0; i < ids.size(); i++) {
        const float * l = logits.data() + i * nv;
        log_softmax(l, nv, lp);
        if (i + 1 < ids.size()) nll -= lp[ids[i + 1]];
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int x, int y) {
            return l[x] != l[y] ? l[x] > l[y] : x < y;
        });
        std::vector<char> in_top(nv, 0);
        for (int j = 0; j < k; j++) in_top[idx[j]] = 1;
        double rest = 0.0;
        for (int j = 0; j < nv; j++) {
            if (!in_top[j]) rest += std::exp(lp[j]);
        }
        char buf[64];
        o += i ? ",{" : "{";
        o += "\"top_ids\":[";
        for (int j = 0; j < k; j++) {
            if (j) o += ",";
            o += std::to_string(idx[j]);
        }
        o += "],\"top_logprobs\":[";
        for (int j = 0; j < k; j++) {
            if (j) o += ",";
            snprintf(buf, sizeof buf, "%.6f", lp[idx[j]]);
            o += buf;
        }
        snprintf(buf, sizeof buf, "%.6g", rest);
        o += "],\"rest\":";
        o += buf;
        o += "}";
    }
    char buf[64];
    snprintf(buf, sizeof buf, "%.6f", ids.size() > 1 ? std::exp(nll / (double) (ids.size() - 1)) : 0.0);
    o += "],\"perplexity\":";
    o += buf;
    o += "}\n";
    fputs(o.c_str(), stdout);
    llama_model_free(model);
    return 0;
}

int run_generate(const Args & a) {
    if (a.model.empty() || a.prompts.empty()) die("generate needs --model and --prompt-ids");
    llama_model * model = load_model(a.model);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int nv = llama_vocab_n_tokens(vocab);
    std::string o = "{\"n\":" + std::to_string(a.n) + ",\"settings\":" + settings_json() + ",\"results\":[";
    for (size_t p = 0; p < a.prompts.size(); p++) {
        const auto & prompt = a.prompts[p];
        if (prompt.empty()) die("empty prompt");
        llama_context * ctx = make_context(model, (uint32_t) (prompt.size() + a.n), a.threads);
        decode(ctx, prompt, 0, false);
        std::vector<llama_token> out;
        const char * stop = "length";
        int pos = (int) prompt.size();
        while ((int) out.size() < a.n) {
            const float * l = llama_get_logits_ith(ctx, -1);
            llama_token t = argmax(l, nv);
            out.push_back(t);
            if (llama_vocab_is_eog(vocab, t)) {
                stop = "eog";
                break;
            }
            if ((int) out.size() == a.n) break;
            decode(ctx, {t}, pos++, true);
        }
        llama_free(ctx);
        o += p ? ",{" : "{";
        o += "\"prompt_ids\":" + ids_json(prompt) + ",\"generated_ids\":" + ids_json(out) + ",\"stop\":" + json_str(stop) + "}";
    }
    o += "]}\n";
    fputs(o.c_str(), stdout);
    llama_model_free(model);
    return 0;
}

int run_kld(const Args & a) {
    if (a.base.empty() || a.test.empty() || !a.text_given) die("kld needs --base, --test and --text-file");
    llama_model * base = load_model(a.base);
    const llama_vocab * vocab = llama_model_get_vocab(base);
    const int nv = llama_vocab_n_tokens(vocab);
    auto ids = tokenize(vocab, a.text, false);
    auto lb = score_logits(base, ids, a.threads);
    llama_model_free(base);
    llama_model * test = load_model(a.test);
    if (llama_vocab_n_tokens(llama_model_get_vocab(test)) != nv) die("vocabularies differ");
    auto lt = score_logits(test, ids, a.threads);
    llama_model_free(test);

    std::vector<double> pb, pt;
    double sum = 0.0, mx = 0.0;
    int agree = 0;
    for (size_t i = 0; i < ids.size(); i++) {
        const float * rb = lb.data() + i * nv;
        const float * rt = lt.data() + i * nv;
        log_softmax(rb, nv, pb);
        log_softmax(rt, nv, pt);
        double kl = 0.0;
        for (int j = 0; j < nv; j++) kl += std::exp(pb[j]) * (pb[j] - pt[j]);
        sum += kl;
        mx = std::max(mx, kl);
        agree += argmax(rb, nv) == argmax(rt, nv);
    }
    printf("{\"n_tokens\":%zu,\"settings\":%s,\"mean_kld\":%.9f,\"max_kld\":%.9f,\"top1_agreement\":%.6f}\n",
           ids.size(), settings_json(), sum / (double) ids.size(), mx, (double) agree / (double) ids.size());
    return 0;
}

}  // namespace

int main(int argc, char ** argv) {
    Args a = parse_args(argc, argv);
    llama_log_set([](ggml_log_level level, const char * text, void *) {
        if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
    }, nullptr);
    llama_backend_init();
    int rc;
    if (a.mode == "tokenize") rc = run_tokenize(a);
    else if (a.mode == "score") rc = run_score(a);
    else if (a.mode == "generate") rc = run_generate(a);
    else if (a.mode == "kld") rc = run_kld(a);
    else die("unknown mode " + a.mode);
    llama_backend_free();
    return rc;
}
