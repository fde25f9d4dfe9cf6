/*
 * test_topk.c - train_topk_correct, the top-k count of evaluations (top-5
 * accuracy), on hand-made logits: ties (the lowest index ranks first, as the
 * top-1 argmax), the boundary of the top 5, K <= 5 (every example counts),
 * NaN logits; and on random logits with many ties against a reference (a
 * stable sort by descending logit) and k = 1 against the argmax count of the
 * loss (nn_softmax_xent), so that top-1 and top-5 can never disagree.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "layers.h"
#include "pstrain/train.h"

static int64_t top5_one(const float *z, int K, int y)
{
    int32_t lab = y;
    return train_topk_correct(z, &lab, 1, K, 5);
}

/* the reference: position of y in a stable sort of the classes by
 * descending logit (insertion sort, ties keep index order) */
static int rank_of(const float *z, int K, int y)
{
    int order[64];
    for (int i = 0; i < K; i++) {
        int j = i;
        while (j > 0 && z[order[j - 1]] < z[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (int i = 0; i < K; i++)
        if (order[i] == y) return i;
    return -1;
}

int main(void)
{
    /* distinct logits: classes 9, 8, ..., 0 in that order */
    float z[10];
    for (int k = 0; k < 10; k++) z[k] = (float)k;
    for (int y = 0; y < 10; y++)
        CHECK(top5_one(z, 10, y) == (y >= 5), "distinct logits, label %d", y);

    /* all equal: the 5 lowest indices are the top 5 */
    float eq[10] = {0};
    for (int y = 0; y < 10; y++) CHECK(top5_one(eq, 10, y) == (y < 5), "all equal, label %d", y);

    /* a tie across the boundary: 4 larger, then classes 4..7 equal */
    const float tie[10] = {9, 8, 7, 6, 1, 1, 1, 1, 0, -1};
    CHECK(top5_one(tie, 10, 4) == 1, "first of the tie is 5th");
    CHECK(top5_one(tie, 10, 5) == 0, "second of the tie is 6th");
    CHECK(top5_one(tie, 10, 7) == 0, "last of the tie is 8th");
    /* the tie before the label: equal logits at lower indices rank above */
    const float tie2[10] = {3, 3, 3, 3, 3, 2, 9, 9, 9, 9};
    CHECK(top5_one(tie2, 10, 0) == 1, "9,9,9,9 above, then class 0");
    CHECK(top5_one(tie2, 10, 1) == 0, "9,9,9,9 and class 0 above class 1");

    /* K <= 5: every label is in the top 5, even with the lowest logit */
    const float small[5] = {4, 3, 2, 1, 0};
    for (int K = 1; K <= 5; K++)
        for (int y = 0; y < K; y++) CHECK(top5_one(small, K, y) == 1, "K %d, label %d", K, y);
    /* K = 6: the lowest is out */
    const float six[6] = {5, 4, 3, 2, 1, 0};
    CHECK(top5_one(six, 6, 5) == 0, "K 6, the lowest logit");
    CHECK(top5_one(six, 6, 4) == 1, "K 6, the 5th");

    /* NaN: the label's never counts, another's never ranks above */
    float nan1[10];
    for (int k = 0; k < 10; k++) nan1[k] = (float)(10 - k);
    nan1[0] = NAN;
    CHECK(top5_one(nan1, 10, 0) == 0, "NaN logit of the label");
    CHECK(top5_one(nan1, 10, 5) == 1, "NaN above does not count: label 5 is 5th");
    CHECK(top5_one(nan1, 10, 6) == 0, "label 6 is 6th");

    /* several rows at once, k of 1..K */
    const int32_t labs[3] = {9, 0, 5};
    CHECK(train_topk_correct(z, labs, 1, 10, 1) == 1, "k 1, the argmax");
    float rows[30];
    for (int i = 0; i < 30; i++) rows[i] = z[i % 10];
    CHECK(train_topk_correct(rows, labs, 3, 10, 5) == 2, "3 rows: labels 9 and 5 in the top 5");
    CHECK(train_topk_correct(rows, labs, 3, 10, 10) == 3, "k = K: all");
    CHECK(train_topk_correct(rows, labs, 3, 10, 4) == 1, "k 4: label 9 only");

    /* random logits with many ties (values 0..3), K 1..40, against the
     * reference and the loss's argmax */
    srand(7);
    for (int trial = 0; trial < 2000; trial++) {
        const int K = 1 + rand() % 40, n = 1 + rand() % 8;
        float lg[8 * 40];
        int32_t lb[8];
        for (int i = 0; i < n * K; i++) lg[i] = (float)(rand() % 4);
        for (int i = 0; i < n; i++) lb[i] = rand() % K;
        for (int k = 1; k <= 6; k++) {
            int64_t want = 0;
            for (int i = 0; i < n; i++) want += rank_of(lg + i * K, K, lb[i]) < k;
            int64_t got = train_topk_correct(lg, lb, n, K, k);
            if (got != want) {
                CHECK(got == want, "trial %d, K %d, k %d: %lld, the reference %lld", trial, K, k,
                      (long long)got, (long long)want);
                break;
            }
        }
        int nc = 0;
        nn_softmax_xent(NULL, lg, lb, n, K, 0.0f, &nc, NULL);
        int64_t t1 = train_topk_correct(lg, lb, n, K, 1);
        if (t1 != nc) CHECK(t1 == nc, "trial %d: top-1 %lld, argmax %d", trial, (long long)t1, nc);
    }
    return check_exit();
}
