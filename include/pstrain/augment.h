/*
 * pstrain/augment.h - the training-time preprocessing recipes: one example's
 * image (decoded pixels or the JPEG bytes) to the out_h x out_w x C uint8
 * image the model sees, with the random training transform or the
 * deterministic evaluation transform of a recipe.
 *
 * Recipes (docs/design.md §3.12 says where each comes
 * from and how close it is):
 *
 *   AUG_RESIZE     train and eval: the whole image resized to out_h x out_w
 *                  (antialiased bilinear, as PIL's resize): what a data set
 *                  stored encoded gets without --augment.
 *   AUG_INCEPTION  tensorflow/models inception/image_processing.py.
 *                  train (distort_image): sample_distorted_bounding_box with
 *                  the whole image as the object box (min_object_covered 0.1,
 *                  aspect ratio [0.75, 1.33] as the example writes it, area
 *                  [0.05, 1.0], 100 attempts, the whole image when none
 *                  fits), bilinear resize to out_h x out_w, horizontal flip
 *                  with probability 1/2, distort_color in one of its two
 *                  orders chosen per example (the example chose it per
 *                  thread): brightness + U[-32/255, 32/255), saturation
 *                  x U[0.5, 1.5), hue + U[-0.2, 0.2), contrast x U[0.5, 1.5)
 *                  about each channel's mean, then clipped to [0, 1].
 *                  eval (eval_image): tf.image.central_crop(0.875) (start =
 *                  (int)((H - 0.875 H) / 2), size = H - 2 start; same for W),
 *                  bilinear resize.
 *   AUG_RESNET     torchvision 0.14's ImageNet recipe on PIL images.
 *                  train: RandomResizedCrop (area [0.08, 1], ratio [3/4, 4/3]
 *                  log-uniform, 10 attempts, then its fallback: the whole
 *                  image clamped to the ratio range, centred), resize,
 *                  RandomHorizontalFlip.
 *                  eval: Resize(S) of the shorter side, S = round(256/224 *
 *                  max(out_h, out_w)) (the longer side int(S * long /
 *                  short), as torchvision), then CenterCrop(out_h, out_w)
 *                  (top = round((h - out_h) / 2), Python's rounding). For a
 *                  square output this is Resize(256) + CenterCrop(224).
 *
 * Resize conventions. AUG_INCEPTION uses TensorFlow 1's legacy
 * resize_bilinear (align_corners=False, half_pixel_centers=False: output
 * pixel j samples input position j * in/out, 2 taps, no antialiasing), which
 * is what tf.image.resize_images and resize_bilinear did for the example; on
 * pixels (and on a JPEG decoded at full scale) the result equals TF's float
 * result to float rounding (the same taps and weights, TF's lerps written
 * as weighted sums; not checked against TF itself, which is not installed).
 * AUG_RESNET's evaluation transform is torchvision's on PIL images to the
 * byte: Pillow 9.4's bilinear resize in its own arithmetic (coefficients in
 * double, then 22-bit fixed point, a horizontal pass rounded to uint8, a
 * vertical pass; Resample.c) on the full-scale decode, which equals PIL's
 * (jpeg.h), then the crop (test jpeg-pil: 198 transforms of 33 JPEGs, gray
 * and colour, odd and even sides, up- and downscaling, 0 bytes differ).
 * AUG_RESNET's training transform and AUG_RESIZE use the same filter
 * (half-pixel centres, a triangle widened by the scale when shrinking:
 * antialiased) computed in float, for speed: PIL rounds to uint8 after its
 * horizontal pass and this does not, so bytes differ from PIL's by at most 1
 * (16 photos of 500x375 to 224x224: max 1, mean 0.15). aug_from_jpeg first
 * decodes the crop with libjpeg-turbo's DCT scaling by the smallest s/8
 * (s = 1, 2, 4 or 8: jpg_decode_region) that keeps it at least out_h x
 * out_w (AUG_RESNET's evaluation transform: s = 8), then resizes from
 * those pixels, mapping the crop with pixel centres (source (u + 0.5) =
 * scaled (u' + 0.5) * 8/s); at s = 8 it is byte-identical to
 * aug_from_pixels on the fully decoded image, at s < 8 it is the same
 * transform of a slightly blurred (DCT-downscaled) image.
 *
 * Output quantisation: every recipe computes in float and returns uint8
 * (the pipeline keeps uint8: a quarter of the feed's RMA bytes of float):
 * out = floor(255 * clip(v, 0, 1) + 0.5), v in [0, 1] units (v = pixel/255
 * as tf.image.convert_image_dtype gives), i.e. round half up to the nearest
 * of 256 levels: at most 1/510 from TF's float value. The pipeline's
 * normalisation then maps the bytes to floats as for any uint8 data set.
 *
 * Randomness: every random choice comes from the 64-bit hash `h` alone,
 * through separate splitmix64 streams for the crop, the flip and the
 * colour (so the number of crop attempts never shifts the other draws).
 * The same (recipe, train, h, image, out size) gives the same bytes,
 * whatever the thread or the scratch's history.
 *
 * Channels: C = 1 or 3. For C = 1 saturation and hue are the identity (a
 * grey pixel has no saturation), brightness and contrast apply.
 */
#ifndef PSTRAIN_AUGMENT_H
#define PSTRAIN_AUGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pstrain/common.h"

enum {
    AUG_RESIZE = 0, /* whole image bilinear-resized to out_h x out_w (no --augment) */
    AUG_INCEPTION,
    AUG_RESNET
};

/* Per-thread buffers (resize taps, float planes, a JPEG region), grown on
 * demand and reused: after the first few images no call allocates. */
typedef struct aug_scratch aug_scratch;
aug_scratch *aug_scratch_new(void);
void aug_scratch_free(aug_scratch *s); /* NULL-safe */

/* A crop rectangle in source pixels: [x, x+w) x [y, y+h). */
typedef struct aug_box {
    int x, y, w, h;
} aug_box;

/* The crop a recipe's training transform takes from a W x H image for hash
 * h (AUG_RESIZE: the whole image; AUG_RESNET eval is a resize then a crop,
 * not a crop of the source, so it is not described by a box). Exposed for
 * tests and for aug_from_jpeg's partial decode. */
aug_box aug_train_box(int recipe, uint64_t h, int W, int H);
/* Inception's eval crop: tf.image.central_crop(0.875). */
aug_box aug_central_crop(int W, int H);

/* The colour parameters a training transform draws from h (AUG_INCEPTION;
 * the other recipes draw only crop and flip). Exposed for tests. */
typedef struct aug_color {
    bool flip;
    int order;                  /* 0: b, s, h, c; 1: b, c, s, h (distort_color) */
    float brightness;           /* added, in [0, 1] units */
    float saturation, contrast; /* factors */
    float hue;                  /* added to hue in turns ([0, 1) is the circle) */
} aug_color;
aug_color aug_train_color(int recipe, uint64_t h);

/* The colour ops of AUG_INCEPTION on an n-pixel float image in [0, 1] units
 * (values may leave [0, 1] between ops, as in TF; no clipping here), with
 * TF's semantics: adjust_brightness, adjust_saturation, adjust_hue,
 * adjust_contrast (C = 3; for C = 1 saturation and hue do nothing). */
void aug_adjust_brightness(float *px, size_t n, int C, float delta);
void aug_adjust_saturation(float *px, size_t n, int C, float factor);
void aug_adjust_hue(float *px, size_t n, int C, float delta);
void aug_adjust_contrast(float *px, size_t n, int C, float factor);
/* distort_color as the training transform applies it, fused (brightness,
 * then saturation and hue in one HSV round trip per pixel, contrast about
 * the channel means, in c->order), clipped to [0, 1] and quantised into
 * out (n x C bytes); img is overwritten. Equal to the aug_adjust_* calls in
 * the same order up to float rounding. */
void aug_distort_color(float *img, size_t n, int C, const aug_color *c, uint8_t *out);

/* One example to out_h x out_w x C uint8 in `out`. train: the random
 * training transform drawn from `h` (a 64-bit hash of (seed, epoch, example
 * id) the pipeline computes); !train: the recipe's deterministic evaluation
 * transform (h unused). px: H x W x C uint8, rows of W*C bytes. C is 1 or 3;
 * H, W, out_h, out_w >= 1. */
void aug_from_pixels(int recipe, bool train, uint64_t h, const uint8_t *px, int H, int W, int C,
                     int out_h, int out_w, uint8_t *out, aug_scratch *s);

/* The same from a JPEG file's bytes buf[0..n) (any JPEG jpg_decode reads;
 * channels 1 or 3 as jpg_decode converts): the crop is drawn from the
 * header's size, then only the rectangle the output needs is decoded
 * (jpg_decode_region: rows above skipped, columns cropped to iMCUs, DCT
 * scaling by the smallest s/8 of 1/8, 2/8, 4/8, 8/8 that keeps it at least
 * the output's size; truncated files as JPG_ALLOW_TRUNCATED decodes them)
 * into s's region
 * buffer and resized from there. At s = 8 the bytes equal aug_from_pixels
 * on jpg_decode's image. Returns 0, or -1 with the decoder's reason in e
 * (out is then undefined). */
int aug_from_jpeg(int recipe, bool train, uint64_t h, const uint8_t *buf, size_t n, int channels,
                  int out_h, int out_w, uint8_t *out, aug_scratch *s, pst_err *e);

#endif
