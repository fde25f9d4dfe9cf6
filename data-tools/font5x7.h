/*
 * font5x7.h - a 5x7 pixel bitmap font (printable ASCII) for the class names
 * that `pstrain-prep preview` writes under its tiles. Each glyph is 5
 * columns of 7 bits (bit 0 = top row); a character cell is 6 px wide (one
 * blank column) and 7 px high. Bytes outside 32..126 (UTF-8 included) are
 * drawn as '?'.
 */
#ifndef PSTRAIN_FONT5X7_H
#define PSTRAIN_FONT5X7_H

#include <stdint.h>

#define FONT_CELL_W 6
#define FONT_CELL_H 7

/* Draws at most `max_chars` characters of `text` with their top-left
 * corner at (x, y) into an image of `width` px per row and `channels`
 * bytes per pixel, setting every channel of a glyph's pixels to `value`.
 * Pixels outside [0, width) x [0, height) are skipped. */
void font_draw(uint8_t *img, int height, int width, int channels, int x, int y, const char *text,
               int max_chars, uint8_t value);

#endif
