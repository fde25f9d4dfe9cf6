/* test_common.c - number parsing and error values. */
#include <string.h>

#include "check.h"
#include "pstrain/common.h"
#include "pstrain/progress.h"

int main(void)
{
    int64_t v;
    int i;
    double d;
    CHECK(pst_parse_i64("123", &v) == 0 && v == 123, "123");
    CHECK(pst_parse_i64("-9", &v) == 0 && v == -9, "-9");
    CHECK(pst_parse_i64("", &v) < 0, "empty accepted");
    CHECK(pst_parse_i64("12x", &v) < 0, "junk accepted");
    CHECK(pst_parse_i64("99999999999999999999", &v) < 0, "overflow accepted");
    CHECK(pst_parse_int("3000000000", &i) < 0, "int overflow accepted");
    CHECK(pst_parse_double("0.25", &d) == 0 && d == 0.25, "0.25");
    CHECK(pst_parse_double("nan", &d) < 0, "nan accepted");
    CHECK(pst_parse_double("1e999", &d) < 0, "inf accepted");
    pst_err e;
    CHECK(pst_fail(&e, "file %s: field %s", "a.h5", "x") == -1, "pst_fail status");
    CHECK(strcmp(e.msg, "file a.h5: field x") == 0, "msg '%s'", e.msg);
    pst_err_prefix(&e, "ctx");
    CHECK(strcmp(e.msg, "ctx: file a.h5: field x") == 0, "prefixed '%s'", e.msg);
    CHECK(pst_fail(NULL, "x") == -1, "NULL err");
    char buf[32];
    pst_format_duration(5.04, buf, sizeof buf);
    CHECK(!strcmp(buf, "5.0s"), "%s", buf);
    pst_format_duration(185, buf, sizeof buf);
    CHECK(!strcmp(buf, "3m05s"), "%s", buf);
    pst_format_duration(3725, buf, sizeof buf);
    CHECK(!strcmp(buf, "1h02m"), "%s", buf);
    pst_format_duration(4e18, buf, sizeof buf); /* an ETA of --steps 4e18: no int overflow */
    CHECK(!strcmp(buf, "99999h59m"), "%s", buf);
    return check_exit();
}
