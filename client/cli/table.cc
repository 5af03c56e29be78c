#include "cli/table.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "torchmon/protocol/json.h"

namespace torchmon::cli {
namespace {

// A cell's width: its code points.
size_t DisplayWidth(absl::string_view s) {
  size_t width = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++width;
  }
  return width;
}

}  // namespace

std::string Printable(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  for (std::string& cell : cells) cell = Printable(cell);
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<size_t> widths;
  return RenderPage(widths, /*header=*/true);
}

std::vector<std::string> Table::Headers() const {
  std::vector<std::string> headers;
  for (const Column& column : columns_) headers.push_back(column.header);
  return headers;
}

std::string Table::RenderPage(std::vector<size_t>& widths, bool header) const {
  widths.resize(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    widths[c] = std::max(widths[c], DisplayWidth(columns_[c].header));
    for (const auto& row : rows_) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
  }
  std::string out;
  auto append_line = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string padding(widths[c] - DisplayWidth(cells[c]), ' ');
      if (c > 0) line += "  ";
      if (columns_[c].align_right) {
        absl::StrAppend(&line, padding, cells[c]);
      } else {
        absl::StrAppend(&line, cells[c], padding);
      }
    }
    absl::StrAppend(&out, absl::StripTrailingAsciiWhitespace(line), "\n");
  };
  if (header) append_line(Headers());
  for (const auto& row : rows_) append_line(row);
  return out;
}

PagedOutput::PagedOutput(bool json, std::string json_key)
    : json_(json), json_key_(std::move(json_key)) {}

std::string PagedOutput::Page(const Table& table, const std::vector<std::string>& json_elements) {
  std::string out;
  if (json_) {
    for (const std::string& element : json_elements) {
      absl::StrAppend(&out, elements_++ == 0 ? absl::StrCat("{", protocol::JsonString(json_key_), ":[\n")
                                             : std::string(",\n"),
                      element);
    }
    return out;
  }
  // The first page prints the header even without rows; later empty pages
  // print nothing.
  if (table.empty() && !first_page_) return out;
  std::vector<std::string> headers = table.Headers();
  const bool header = first_page_ || headers != headers_;
  if (header && !first_page_) {
    out += "\n";
    widths_.clear();
  }
  first_page_ = false;
  headers_ = std::move(headers);
  return out + table.RenderPage(widths_, header);
}

std::string PagedOutput::End() const {
  if (!json_) return "";
  if (elements_ == 0) return absl::StrCat("{", protocol::JsonString(json_key_), ":[]}\n");
  return "\n]}\n";
}

}  // namespace torchmon::cli
