/*
 * bn_affine.c - batch norm's forward output pass (bn_impl.h): y = x*scale[c]
 * + shift[c] (+ the fused add's other addend), then ReLU, over a range of
 * rows; the training forward's scale and shift come from the batch's
 * statistics (bn.c), the inference forward's from the moving ones.
 */
#include "bn_impl.h"

/* ---- the forward's output: y = x*scale[c] + shift[c] (+ res), then ReLU ---- */

AI void affine_rows(float *out, size_t ldo, const float *inp, const float *res, const float *scale,
                    const float *shift, int M, int C, const bool has_res, const bool relu)
{
    int cv = C / 16 * 16;
    const size_t pfo = pf_dist(BN_PF, ldo, (size_t)C);
    for (int i = 0; i < M; i++) {
        size_t o = (size_t)i * C, oo = (size_t)i * ldo;
        for (int c = 0; c < cv; c += 16) {
            pf_line(inp, o + c, false), pf_far(out, oo + c, pfo, true);
            if (has_res) pf_line(res, o + c, false);
            vf16 v = vld(inp + o + c) * vld(scale + c) + vld(shift + c);
            if (has_res) v = v + vld(res + o + c);
            vst(out + oo + c, relu ? vkeep(v, v) : v);
        }
        for (int c = cv; c < C; c++) {
            float v = inp[o + c] * scale[c] + shift[c];
            if (has_res) v = v + res[o + c];
            out[oo + c] = relu ? (v > 0.0f ? v : 0.0f) : v;
        }
    }
}

/* 8, 16, 24, 32, 48 or 64 channels (a half chunk of 8 lanes for 8 and 24): the same expression with
 * scale and shift in registers (the loop above reloads them and recomputes the row's pointers per
 * row, which cost more than the row's arithmetic here). */
AI void affine_chunk(float *out, size_t ldo, const float *inp, const float *res, const float *scale,
                     const float *shift, int M, const int NG, const bool H8, const bool has_res,
                     const bool relu)
{
    const int C = 16 * NG + 8 * H8;
    const size_t pfo = pf_dist(BN_PFC, ldo, (size_t)C);
    vf16 sc[4], sh[4];
    vf8 sc8 = {0}, sh8 = {0};
    for (int g = 0; g < NG; g++) sc[g] = vld(scale + 16 * g), sh[g] = vld(shift + 16 * g);
    if (H8) sc8 = vld8(scale + 16 * NG), sh8 = vld8(shift + 16 * NG);
    for (int i = 0; i < M; i++) {
        for (int g = 0; g < NG; g++) {
            size_t e = (size_t)i * C + 16 * g, eo = (size_t)i * ldo + 16 * g;
            pf_chunk(inp, e, false), pf_far(out, eo, pfo, true);
            if (has_res) pf_chunk(res, e, false);
            vf16 v = vld(inp + e) * sc[g] + sh[g];
            if (has_res) v = v + vld(res + e);
            vst(out + eo, relu ? vkeep(v, v) : v);
        }
        if (H8) {
            size_t e = (size_t)i * C + 16 * NG, eo = (size_t)i * ldo + 16 * NG;
            pf_chunk(inp, e, false), pf_far(out, eo, pfo, true);
            if (has_res) pf_chunk(res, e, false);
            vf8 v = vld8(inp + e) * sc8 + sh8;
            if (has_res) v = v + vld8(res + e);
            vst8(out + eo, relu ? vkeep8(v, v) : v);
        }
    }
}

AI void affine_any(float *out, size_t ldo, const float *inp, const float *res, const float *scale,
                   const float *shift, int M, int C, const bool has_res, const bool relu)
{
    if (C == 8)
        affine_chunk(out, ldo, inp, res, scale, shift, M, 0, true, has_res, relu);
    else if (C == 16)
        affine_chunk(out, ldo, inp, res, scale, shift, M, 1, false, has_res, relu);
    else if (C == 24)
        affine_chunk(out, ldo, inp, res, scale, shift, M, 1, true, has_res, relu);
    else if (C == 32)
        affine_chunk(out, ldo, inp, res, scale, shift, M, 2, false, has_res, relu);
    else if (C == 48)
        affine_chunk(out, ldo, inp, res, scale, shift, M, 3, false, has_res, relu);
    else if (C == 64)
        affine_chunk(out, ldo, inp, res, scale, shift, M, 4, false, has_res, relu);
    else
        affine_rows(out, ldo, inp, res, scale, shift, M, C, has_res, relu);
}

NN_CLONES void nn_bn_affine(float *out, size_t ldo, const float *inp, const float *res,
                            const float *scale, const float *shift, int M, int C, bool relu)
{
    if (res) {
        if (relu)
            affine_any(out, ldo, inp, res, scale, shift, M, C, true, true);
        else
            affine_any(out, ldo, inp, res, scale, shift, M, C, true, false);
    } else if (relu) {
        affine_any(out, ldo, inp, NULL, scale, shift, M, C, false, true);
    } else {
        affine_any(out, ldo, inp, NULL, scale, shift, M, C, false, false);
    }
}
