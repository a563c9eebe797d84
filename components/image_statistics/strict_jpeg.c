/* The eval pixels of a JPEG, decoded strictly: libjpeg's warnings are errors.

   The same libjpeg calls as TensorFlow's decode_and_crop_jpeg with its defaults (the
   integer-fast IDCT, fancy upsampling, jpeg_crop_scanline, jpeg_skip_scanlines), so the
   pixels are TensorFlow's; TensorFlow counts the warnings (corrupt entropy-coded data, a
   premature end) and returns whatever the decoder made of them. The crop is then resized
   as eval_images resizes it (tf.image.resize, bilinear with half-pixel centres, in
   float32, then +0.5 and truncated to uint8), with TensorFlow's float operations in its
   order, while it is still in the cache. Built with -ffp-contract=off: a fused
   multiply-add would round differently from TensorFlow's kernel, which has none. Plain C
   for ctypes, which releases the GIL for the call. */

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

enum { DECODED = 0, CORRUPT = 1, NOT_HERE = 2 };

struct strict_error {
  struct jpeg_error_mgr manager;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

static void stop(j_common_ptr cinfo) {
  struct strict_error *error = (struct strict_error *)cinfo->err;
  (*cinfo->err->format_message)(cinfo, error->message);
  longjmp(error->jump, 1);
}

static void stop_on_warning(j_common_ptr cinfo, int level) {
  if (level < 0) stop(cinfo); /* level >= 0 is trace output */
}

/* One output coordinate's source pixels and weight: TensorFlow's CachedInterpolation
   from its HalfPixelScaler. */
struct interpolation {
  long lower, upper;
  float lerp;
};

static void interpolation_weights(long out_size, long in_size, struct interpolation *weights) {
  const float scale = (float)in_size / (float)out_size;
  for (long i = 0; i < out_size; i++) {
    const float in = ((float)i + 0.5f) * scale - 0.5f;
    const float in_floor = floorf(in);
    const long lower = (long)in_floor, upper = (long)ceilf(in);
    weights[i].lower = lower > 0 ? lower : 0;
    weights[i].upper = upper < in_size - 1 ? upper : in_size - 1;
    weights[i].lerp = in - in_floor;
  }
}

static inline float lerp2(float top_left, float top_right, float bottom_left,
                          float bottom_right, float x_lerp, float y_lerp) {
  const float top = top_left + (top_right - top_left) * x_lerp;
  const float bottom = bottom_left + (bottom_right - bottom_left) * x_lerp;
  return top + (bottom - top) * y_lerp;
}

/* eval_images' resize of an RGB `crop` (height x width) to `out` (out_height x
   out_width); the identity at the same size. */
static void resize_bilinear(const unsigned char *crop, long height, long width,
                            unsigned char *out, long out_height, long out_width,
                            struct interpolation *xs, struct interpolation *ys) {
  interpolation_weights(out_width, width, xs);
  interpolation_weights(out_height, height, ys);
  for (long y = 0; y < out_height; y++) {
    const unsigned char *top_row = crop + ys[y].lower * width * 3;
    const unsigned char *bottom_row = crop + ys[y].upper * width * 3;
    unsigned char *out_row = out + y * out_width * 3;
    for (long x = 0; x < out_width; x++) {
      const long left = xs[x].lower * 3, right = xs[x].upper * 3;
      for (int c = 0; c < 3; c++) {
        const float value =
            lerp2(top_row[left + c], top_row[right + c], bottom_row[left + c],
                  bottom_row[right + c], xs[x].lerp, ys[y].lerp);
        out_row[x * 3 + c] = (unsigned char)(value + 0.5f);
      }
    }
  }
}

/* Decodes the window (crop_y, crop_x, crop_height, crop_width) of a JPEG and resizes it
   into `out` (out_height x out_width x 3 RGB): the crop itself when they are the same
   size. Returns DECODED; CORRUPT with libjpeg's reason in `reason`; or NOT_HERE for an
   image left to TensorFlow: CMYK or YCCK (TensorFlow converts those to RGB itself), a
   window outside the frame, an empty output, or no memory for the decode. */
int imgpipe_strict_decode(const unsigned char *data, unsigned long size, int crop_y,
                          int crop_x, int crop_height, int crop_width, int out_height,
                          int out_width, unsigned char *out, char *reason, int reason_size) {
  struct jpeg_decompress_struct cinfo;
  struct strict_error error;
  unsigned char *volatile row = NULL;
  /* The crop, when it is resized; interpolation weights after it. */
  unsigned char *volatile crop = NULL;
  /* What a jump back to setjmp returns: out of memory is no verdict on the data. */
  volatile int failure = CORRUPT;

  error.message[0] = '\0';
  cinfo.err = jpeg_std_error(&error.manager);
  error.manager.error_exit = stop;
  error.manager.emit_message = stop_on_warning;
  if (setjmp(error.jump)) {
    snprintf(reason, reason_size, "%s", error.message);
    free(row);
    free(crop);
    jpeg_destroy_decompress(&cinfo);
    return failure;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, size);
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return NOT_HERE;
  }
  cinfo.out_color_space = JCS_RGB;
  cinfo.do_fancy_upsampling = TRUE;
  cinfo.dct_method = JDCT_IFAST;
  jpeg_start_decompress(&cinfo);
  if (crop_x < 0 || crop_y < 0 || crop_width < 1 || crop_height < 1 || out_width < 1 ||
      out_height < 1 ||
      (unsigned long)crop_x + (unsigned long)crop_width > cinfo.output_width ||
      (unsigned long)crop_y + (unsigned long)crop_height > cinfo.output_height) {
    jpeg_destroy_decompress(&cinfo);
    return NOT_HERE;
  }
  /* The region libjpeg decodes starts at an iMCU boundary at or left of crop_x. */
  JDIMENSION region_x = (JDIMENSION)crop_x, region_width = (JDIMENSION)crop_width;
  jpeg_crop_scanline(&cinfo, &region_x, &region_width);
  jpeg_skip_scanlines(&cinfo, (JDIMENSION)crop_y);
  const size_t offset = (size_t)(crop_x - (int)region_x) * 3;
  const size_t crop_stride = (size_t)crop_width * 3;
  const int resized = crop_height != out_height || crop_width != out_width;
  struct interpolation *xs = NULL, *ys = NULL;
  unsigned char *crop_pixels = out;
  if (resized) {
    const size_t crop_bytes = (size_t)crop_height * crop_stride;
    const size_t aligned = (crop_bytes + 15) & ~(size_t)15;
    crop = malloc(aligned + sizeof(struct interpolation) * ((size_t)out_width + out_height));
    if (crop == NULL) {
      failure = NOT_HERE;
      longjmp(error.jump, 1);
    }
    crop_pixels = crop;
    xs = (struct interpolation *)(crop + aligned);
    ys = xs + out_width;
  }
  row = malloc((size_t)cinfo.output_width * 3);
  if (row == NULL) {
    failure = NOT_HERE;
    longjmp(error.jump, 1);
  }
  for (int line = 0; line < crop_height; line++) {
    JSAMPROW rows[1] = {row};
    if (jpeg_read_scanlines(&cinfo, rows, 1) != 1) {
      snprintf(error.message, sizeof error.message, "premature end of JPEG data");
      longjmp(error.jump, 1);
    }
    memcpy(crop_pixels + (size_t)line * crop_stride, row + offset, crop_stride);
  }
  /* Unlike TensorFlow, read on to the end of the data, which is where most corruption
     shows (a scan that ends early, or bytes left over before the next marker).
     libjpeg-turbo's skip to the last row would not read the rest, so the rows after the
     window are skipped but for the last one, which is decoded. */
  if (cinfo.output_scanline + 1 < cinfo.output_height)
    jpeg_skip_scanlines(&cinfo, cinfo.output_height - cinfo.output_scanline - 1);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW rows[1] = {row};
    jpeg_read_scanlines(&cinfo, rows, 1);
  }
  jpeg_finish_decompress(&cinfo);
  free(row);
  jpeg_destroy_decompress(&cinfo);
  if (resized)
    resize_bilinear(crop_pixels, crop_height, crop_width, out, out_height, out_width, xs, ys);
  free(crop);
  return DECODED;
}
