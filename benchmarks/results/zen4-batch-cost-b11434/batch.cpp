// Batch costs in llama.cpp b11434: decode n tokens after a 256-token prefix, logits for the last or for all.
#include "llama.h"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <map>
#include <string>
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char ** argv) {
    llama_backend_init();
    auto mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    auto cp = llama_context_default_params();
    cp.n_ctx = 2048; cp.n_batch = cp.n_ubatch = 512; cp.n_threads = cp.n_threads_batch = 2;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
    llama_context * ctx = llama_init_from_model(model, cp);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::string text;
    for (int i = 0; i < 40; i++) text += "def reverse(head):\n    prev = None\n    while head:\n        nxt = head.next\n";
    std::vector<llama_token> toks(4096);
    int nt = llama_tokenize(vocab, text.c_str(), text.size(), toks.data(), toks.size(), false, false);
    toks.resize(nt);
    llama_batch batch = llama_batch_init(512, 0, 1);
    auto fill = [&](int start, int n, int pos, bool all) {
        batch.n_tokens = n;
        for (int i = 0; i < n; i++) {
            batch.token[i] = toks[start + i]; batch.pos[i] = pos + i; batch.n_seq_id[i] = 1; batch.seq_id[i][0] = 0;
            batch.logits[i] = all || i == n - 1;
        }
    };
    std::map<std::pair<int,int>, std::vector<double>> res;
    int ns[] = {1, 2, 4, 8, 16, 17, 32};
    for (int rep = 0; rep < 7; rep++) for (int n : ns) for (int all = 0; all < 2; all++) {
        llama_memory_seq_rm(llama_get_memory(ctx), 0, -1, -1);
        fill(0, 256, 0, false); llama_decode(ctx, batch);
        fill(256, n, 256, all);
        double t = now(); llama_decode(ctx, batch); llama_get_logits(ctx); llama_synchronize(ctx);
        res[{n, all}].push_back(now() - t);
    }
    auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
    double t1 = med(res[{1, 0}]);
    for (auto & [k, v] : res) printf("n=%2d all_logits=%-5s %7.1f ms  r=%5.2f\n", k.first, k.second ? "True" : "False", med(v) * 1000, med(v) / t1);
}
