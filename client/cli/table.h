// torchmonctl's tables for people, page by page, and the JSON document a
// paged answer makes for scripts (docs/cli.md). Pure; a Table or
// PagedOutput is used by one thread at a time.
#ifndef TORCHMON_CLI_TABLE_H_
#define TORCHMON_CLI_TABLE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace torchmon::cli {

// `s` with each control character escaped as \xHH, so that it stays on one
// line (every cell of a Table is made so).
std::string Printable(absl::string_view s);

// Columns separated by two spaces, each as wide as its widest cell (counted
// in code points); no trailing spaces. Control characters in cells are
// escaped so a row always stays on one line.
class Table {
 public:
  struct Column {
    std::string header;
    bool align_right = false;
  };

  explicit Table(std::vector<Column> columns);

  // A row with fewer cells than columns is padded with empty cells.
  void AddRow(std::vector<std::string> cells);

  // The header line and every row, each ending in '\n'.
  std::string Render() const;
  // The rows (after the header line if `header`), each column at least
  // widths[c] wide; widths grows to what this table needs, so that the
  // pages of one answer line up.
  std::string RenderPage(std::vector<size_t>& widths, bool header) const;
  bool empty() const { return rows_.empty(); }
  std::vector<std::string> Headers() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// A paged answer printed as its pages arrive. With JSON, one document whose
// array continues from page to page; as a table, the columns keep their
// widths (growing when a page needs it) and the header is repeated only when
// a page's columns differ (a windows page with other aggregations).
class PagedOutput {
 public:
  // `json_key` names the document's array ("series").
  PagedOutput(bool json, std::string json_key);
  // The text to print for one page: its table, or its JSON elements.
  std::string Page(const Table& table, const std::vector<std::string>& json_elements);
  // The text to print after the last page.
  std::string End() const;

 private:
  const bool json_;
  const std::string json_key_;
  size_t elements_ = 0;
  bool first_page_ = true;
  std::vector<std::string> headers_;
  std::vector<size_t> widths_;
};

}  // namespace torchmon::cli

#endif  // TORCHMON_CLI_TABLE_H_
