#include "hpctrain/io/h5.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>

namespace hpctrain::io {

std::recursive_mutex& h5_mutex() {
  static std::recursive_mutex m;
  return m;
}

void h5_quiet_errors() {
  static std::once_flag once;
  std::call_once(once, [] {
    H5Lock lock;
    (void)H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  });
}

namespace {

struct StackEntry {
  std::string desc;   // the message the failing HDF5 function wrote
  std::string minor;  // the minor error class text, e.g. "file signature not found"
};

herr_t collect_entry(unsigned /*n*/, const H5E_error2_t* err, void* data) {
  auto* entries = static_cast<std::vector<StackEntry>*>(data);
  StackEntry e;
  if (err->desc) e.desc = err->desc;
  char buf[256];
  H5E_type_t type;
  if (H5Eget_msg(err->min_num, &type, buf, sizeof buf) > 0) e.minor = buf;
  entries->push_back(std::move(e));
  return 0;
}

}  // namespace

std::string h5_error_stack_message() {
  H5Lock lock;
  std::vector<StackEntry> entries;  // outermost (the API call) first
  (void)H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, &collect_entry, &entries);
  if (entries.empty()) return {};
  // Innermost first: that is the root cause ("file signature not found"); the outer entries say
  // what HDF5 was doing ("unable to open file"). Duplicates are dropped.
  std::vector<std::string> parts;
  auto add = [&parts](const std::string& s) {
    if (!s.empty() && std::find(parts.begin(), parts.end(), s) == parts.end()) parts.push_back(s);
  };
  const StackEntry& root = entries.back();
  add(root.desc);
  add(root.minor);
  for (auto it = entries.rbegin() + 1; it != entries.rend(); ++it) add(it->desc);
  std::string msg = parts.empty() ? std::string("unknown HDF5 error") : parts.front();
  if (parts.size() > 1) {
    msg += " (";
    for (std::size_t i = 1; i < parts.size(); ++i) {
      if (i > 1) msg += "; ";
      msg += parts[i];
    }
    msg += ")";
  }
  return msg;
}

namespace detail {
void throw_h5_error(const std::string& what, const char* file, int line) {
  std::string reason = h5_error_stack_message();
  (void)H5Eclear2(H5E_DEFAULT);
  throw ::hpctrain::Error(what + ": " + (reason.empty() ? "HDF5 call failed" : reason), file, line);
}
}  // namespace detail

// ---- helpers -----------------------------------------------------------------------------

bool h5_exists(hid_t loc, const std::string& path) {
  H5Lock lock;
  h5_quiet_errors();
  // H5Lexists fails (rather than answering "no") when an intermediate group is missing, so walk
  // the path one component at a time.
  std::string prefix;
  std::size_t pos = 0;
  while (pos < path.size()) {
    std::size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    std::string part = path.substr(pos, next - pos);
    pos = next + 1;
    if (part.empty()) {
      if (prefix.empty()) prefix = "/";
      continue;
    }
    prefix += (prefix.empty() || prefix.back() == '/') ? part : "/" + part;
    if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

std::vector<hsize_t> h5_dims(hid_t space) {
  H5Lock lock;
  int rank = HPCTRAIN_CHECK_H5(H5Sget_simple_extent_ndims(space), "read dataspace rank");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) {
    HPCTRAIN_CHECK_H5(H5Sget_simple_extent_dims(space, dims.data(), nullptr),
                      "read dataspace dimensions");
  }
  return dims;
}

namespace {

void write_attr_raw(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type,
                    hid_t space, const void* data) {
  H5Lock lock;
  if (H5Aexists(obj, name.c_str()) > 0) {
    HPCTRAIN_CHECK_H5(H5Adelete(obj, name.c_str()), "replace attribute '" + name + "'");
  }
  H5Attribute attr(HPCTRAIN_CHECK_H5(
      H5Acreate2(obj, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT),
      "create attribute '" + name + "'"));
  HPCTRAIN_CHECK_H5(H5Awrite(attr.get(), mem_type, data), "write attribute '" + name + "'");
}

H5Dataspace scalar_space() {
  return H5Dataspace(HPCTRAIN_CHECK_H5(H5Screate(H5S_SCALAR), "create scalar dataspace"));
}

H5Dataspace vector_space(std::size_t n) {
  hsize_t dim = n;
  return H5Dataspace(HPCTRAIN_CHECK_H5(H5Screate_simple(1, &dim, nullptr), "create dataspace"));
}

H5Type vlen_utf8_string_type() {
  H5Type t(HPCTRAIN_CHECK_H5(H5Tcopy(H5T_C_S1), "copy string type"));
  HPCTRAIN_CHECK_H5(H5Tset_size(t.get(), H5T_VARIABLE), "make string type variable-length");
  HPCTRAIN_CHECK_H5(H5Tset_cset(t.get(), H5T_CSET_UTF8), "set string type to UTF-8");
  return t;
}

/// Opens attribute `name` and returns it with its dataspace's element count.
std::pair<H5Attribute, hssize_t> open_attr(hid_t obj, const std::string& name,
                                           const std::string& where) {
  HPCTRAIN_REQUIRE(H5Aexists(obj, name.c_str()) > 0,
                   where + ": attribute '" + name + "' is missing");
  H5Attribute attr(HPCTRAIN_CHECK_H5(H5Aopen(obj, name.c_str(), H5P_DEFAULT),
                                     where + ": open attribute '" + name + "'"));
  H5Dataspace space(
      HPCTRAIN_CHECK_H5(H5Aget_space(attr.get()), where + ": attribute '" + name + "'"));
  hssize_t n = HPCTRAIN_CHECK_H5(H5Sget_simple_extent_npoints(space.get()),
                                 where + ": attribute '" + name + "'");
  return {std::move(attr), n};
}

H5T_class_t attr_class(hid_t attr, const std::string& name, const std::string& where) {
  H5Type t(HPCTRAIN_CHECK_H5(H5Aget_type(attr), where + ": attribute '" + name + "'"));
  return H5Tget_class(t.get());
}

}  // namespace

void h5_write_attribute(hid_t obj, const std::string& name, std::int64_t value) {
  H5Lock lock;
  write_attr_raw(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, scalar_space().get(), &value);
}

void h5_write_attribute(hid_t obj, const std::string& name, double value) {
  H5Lock lock;
  write_attr_raw(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, scalar_space().get(), &value);
}

void h5_write_attribute(hid_t obj, const std::string& name,
                        const std::vector<std::int64_t>& values) {
  H5Lock lock;
  write_attr_raw(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, vector_space(values.size()).get(),
                 values.data());
}

void h5_write_attribute(hid_t obj, const std::string& name, const std::string& value) {
  H5Lock lock;
  H5Type t = vlen_utf8_string_type();
  const char* p = value.c_str();
  write_attr_raw(obj, name, t.get(), t.get(), scalar_space().get(), &p);
}

void h5_write_attribute(hid_t obj, const std::string& name,
                        const std::vector<std::string>& values) {
  H5Lock lock;
  H5Type t = vlen_utf8_string_type();
  std::vector<const char*> ptrs;
  ptrs.reserve(values.size());
  for (const auto& v : values) ptrs.push_back(v.c_str());
  write_attr_raw(obj, name, t.get(), t.get(), vector_space(values.size()).get(), ptrs.data());
}

bool h5_has_attribute(hid_t obj, const std::string& name) {
  H5Lock lock;
  h5_quiet_errors();
  return H5Aexists(obj, name.c_str()) > 0;
}

std::int64_t h5_read_int_attribute(hid_t obj, const std::string& name, const std::string& where) {
  H5Lock lock;
  auto [attr, n] = open_attr(obj, name, where);
  HPCTRAIN_REQUIRE(attr_class(attr.get(), name, where) == H5T_INTEGER && n == 1,
                   where + ": attribute '" + name + "' must be one integer");
  std::int64_t v = 0;
  HPCTRAIN_CHECK_H5(H5Aread(attr.get(), H5T_NATIVE_INT64, &v),
                    where + ": read attribute '" + name + "'");
  return v;
}

double h5_read_double_attribute(hid_t obj, const std::string& name, const std::string& where) {
  H5Lock lock;
  auto [attr, n] = open_attr(obj, name, where);
  H5T_class_t c = attr_class(attr.get(), name, where);
  HPCTRAIN_REQUIRE((c == H5T_FLOAT || c == H5T_INTEGER) && n == 1,
                   where + ": attribute '" + name + "' must be one number");
  double v = 0;
  HPCTRAIN_CHECK_H5(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &v),
                    where + ": read attribute '" + name + "'");
  return v;
}

std::vector<std::int64_t> h5_read_int_array_attribute(hid_t obj, const std::string& name,
                                                      const std::string& where) {
  H5Lock lock;
  auto [attr, n] = open_attr(obj, name, where);
  HPCTRAIN_REQUIRE(attr_class(attr.get(), name, where) == H5T_INTEGER,
                   where + ": attribute '" + name + "' must hold integers");
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  if (n > 0) {
    HPCTRAIN_CHECK_H5(H5Aread(attr.get(), H5T_NATIVE_INT64, v.data()),
                      where + ": read attribute '" + name + "'");
  }
  return v;
}

std::vector<std::string> h5_read_string_array_attribute(hid_t obj, const std::string& name,
                                                        const std::string& where) {
  H5Lock lock;
  auto [attr, n] = open_attr(obj, name, where);
  H5Type file_type(HPCTRAIN_CHECK_H5(H5Aget_type(attr.get()), where + ": attribute '" + name + "'"));
  HPCTRAIN_REQUIRE(H5Tget_class(file_type.get()) == H5T_STRING,
                   where + ": attribute '" + name + "' must hold strings");
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(n));
  if (H5Tis_variable_str(file_type.get()) > 0) {
    H5Type mem = vlen_utf8_string_type();
    std::vector<char*> ptrs(static_cast<std::size_t>(n), nullptr);
    HPCTRAIN_CHECK_H5(H5Aread(attr.get(), mem.get(), ptrs.data()),
                      where + ": read attribute '" + name + "'");
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    H5Dataspace space(HPCTRAIN_CHECK_H5(H5Aget_space(attr.get()), "attribute dataspace"));
    (void)H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
  } else {
    std::size_t len = H5Tget_size(file_type.get());
    std::vector<char> buf(len * static_cast<std::size_t>(n) + 1, '\0');
    HPCTRAIN_CHECK_H5(H5Aread(attr.get(), file_type.get(), buf.data()),
                      where + ": read attribute '" + name + "'");
    for (hssize_t i = 0; i < n; ++i) {
      const char* p = buf.data() + static_cast<std::size_t>(i) * len;
      out.emplace_back(p, strnlen(p, len));
    }
  }
  return out;
}

std::string h5_read_string_attribute(hid_t obj, const std::string& name,
                                     const std::string& where) {
  auto v = h5_read_string_array_attribute(obj, name, where);
  HPCTRAIN_REQUIRE(v.size() == 1, where + ": attribute '" + name + "' must be one string");
  return v.front();
}

}  // namespace hpctrain::io
