/* The eval pixels of a JPEG, decoded strictly: libjpeg's warnings are errors.

   The same libjpeg calls as TensorFlow's decode_and_crop_jpeg with its defaults (the
   integer-fast IDCT, fancy upsampling, jpeg_crop_scanline, jpeg_skip_scanlines), so the
   pixels are TensorFlow's; TensorFlow counts the warnings (corrupt entropy-coded data, a
   premature end) and returns whatever the decoder made of them. Plain C for ctypes,
   which releases the GIL for the call. */

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

/* Decodes the window (crop_y, crop_x, crop_height, crop_width) of a JPEG into `out`
   (crop_height x crop_width x 3 RGB). Returns DECODED; CORRUPT with libjpeg's reason in
   `reason`; or NOT_HERE for an image left to TensorFlow: CMYK or YCCK (TensorFlow
   converts those to RGB itself) or a window outside the frame. */
int imgpipe_strict_crop_decode(const unsigned char *data, unsigned long size, int crop_y,
                               int crop_x, int crop_height, int crop_width,
                               unsigned char *out, char *reason, int reason_size) {
  struct jpeg_decompress_struct cinfo;
  struct strict_error error;
  unsigned char *volatile row = NULL;

  cinfo.err = jpeg_std_error(&error.manager);
  error.manager.error_exit = stop;
  error.manager.emit_message = stop_on_warning;
  if (setjmp(error.jump)) {
    snprintf(reason, reason_size, "%s", error.message);
    free(row);
    jpeg_destroy_decompress(&cinfo);
    return CORRUPT;
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
  if (crop_x < 0 || crop_y < 0 || crop_width < 1 || crop_height < 1 ||
      (JDIMENSION)(crop_x + crop_width) > cinfo.output_width ||
      (JDIMENSION)(crop_y + crop_height) > cinfo.output_height) {
    jpeg_destroy_decompress(&cinfo);
    return NOT_HERE;
  }
  /* The region libjpeg decodes starts at an iMCU boundary at or left of crop_x. */
  JDIMENSION region_x = (JDIMENSION)crop_x, region_width = (JDIMENSION)crop_width;
  jpeg_crop_scanline(&cinfo, &region_x, &region_width);
  jpeg_skip_scanlines(&cinfo, (JDIMENSION)crop_y);
  const size_t offset = (size_t)(crop_x - (int)region_x) * 3;
  const size_t out_stride = (size_t)crop_width * 3;
  row = malloc((size_t)cinfo.output_width * 3);
  if (row == NULL) {
    snprintf(error.message, sizeof error.message, "out of memory");
    longjmp(error.jump, 1);
  }
  for (int line = 0; line < crop_height; line++) {
    JSAMPROW rows[1] = {row};
    if (jpeg_read_scanlines(&cinfo, rows, 1) != 1) {
      snprintf(error.message, sizeof error.message, "premature end of JPEG data");
      longjmp(error.jump, 1);
    }
    memcpy(out + (size_t)line * out_stride, row + offset, out_stride);
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
  return DECODED;
}
