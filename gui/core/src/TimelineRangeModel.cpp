#include <algorithm>
#include <numeric>

#include "trainscope/gui/TimelineModel.h"

namespace ts::gui {

TimelineRangeModel::TimelineRangeModel(QObject* parent) : QAbstractTableModel(parent) {}

void TimelineRangeModel::setRows(std::vector<RangeRow> rows, int64_t t0, int64_t t1) {
  beginResetModel();
  rows_ = std::move(rows);
  t0_ = t0;
  t1_ = t1;
  endResetModel();
}

void TimelineRangeModel::clear() {
  setRows({}, 0, 0);
}

int TimelineRangeModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int TimelineRangeModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant TimelineRangeModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() < 0 || index.row() >= rowCount() || index.column() < 0 ||
      index.column() >= ColumnCount)
    return {};
  const RangeRow& r = rows_[static_cast<size_t>(index.row())];
  const auto col = static_cast<Column>(index.column());
  if (role == Qt::DisplayRole) {
    switch (col) {
      case Name:
        return QString::fromStdString(r.name);
      case Category:
        return QString::fromLatin1(profiler::toString(r.category)) +
               (r.device ? QStringLiteral(" (GPU)") : QString());
      case Count:
        return QString::number(r.count);
      case Total:
        return formatDurationNs(static_cast<double>(r.totalNs));
      case Mean:
        return formatDurationNs(r.meanNs);
      case Share:
        return QString::number(r.share * 100.0, 'f', 1) + " %";
      default:
        return {};
    }
  }
  if (role == Qt::UserRole) {
    switch (col) {
      case Name:
        return QString::fromStdString(r.name);
      case Category:
        return static_cast<int>(r.category);
      case Count:
        return static_cast<qlonglong>(r.count);
      case Total:
        return static_cast<qlonglong>(r.totalNs);
      case Mean:
        return r.meanNs;
      case Share:
        return r.share;
      default:
        return {};
    }
  }
  if (role == Qt::TextAlignmentRole)
    return col >= Count ? QVariant(Qt::AlignRight | Qt::AlignVCenter)
                        : QVariant(Qt::AlignLeft | Qt::AlignVCenter);
  if (role == Qt::ToolTipRole && col == Name) return QString::fromStdString(r.name);
  return {};
}

QVariant TimelineRangeModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o == Qt::Horizontal && role == Qt::ToolTipRole && section == Share)
    return QStringLiteral(
        "Self time: the time inside the range less that of the spans nested directly inside "
        "(a step's share excludes its kernels'), as a share of all self time, so the shares "
        "add up to 100%");
  if (role != Qt::DisplayRole || o != Qt::Horizontal) return {};
  static const char* names[] = {"Kernel / op", "Category", "Count",
                                "Total",       "Mean",     "Share (self)"};
  return section >= 0 && section < ColumnCount ? QString::fromLatin1(names[section]) : QVariant();
}

void TimelineRangeModel::sort(int column, Qt::SortOrder order) {
  if (column < 0 || column >= ColumnCount) return;
  emit layoutAboutToBeChanged({}, QAbstractItemModel::VerticalSortHint);
  const QModelIndexList before = persistentIndexList();
  std::vector<int> perm(rows_.size());
  std::iota(perm.begin(), perm.end(), 0);
  auto key = [&](int i) -> const RangeRow& { return rows_[static_cast<size_t>(i)]; };
  auto less = [&](int a, int b) {
    const RangeRow &x = key(a), &y = key(b);
    switch (static_cast<Column>(column)) {
      case Name:
        return x.name < y.name;
      case Category:
        return x.category < y.category;
      case Count:
        return x.count < y.count;
      case Total:
        return x.totalNs < y.totalNs;
      case Mean:
        return x.meanNs < y.meanNs;
      default:
        return x.share < y.share;
    }
  };
  std::stable_sort(perm.begin(), perm.end(), [&](int a, int b) {
    return order == Qt::AscendingOrder ? less(a, b) : less(b, a);
  });
  std::vector<RangeRow> sorted;
  sorted.reserve(rows_.size());
  std::vector<int> newRow(rows_.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    newRow[static_cast<size_t>(perm[i])] = static_cast<int>(i);
    sorted.push_back(std::move(rows_[static_cast<size_t>(perm[i])]));
  }
  rows_ = std::move(sorted);
  QModelIndexList after;
  for (const auto& idx : before)
    after << index(newRow[static_cast<size_t>(idx.row())], idx.column());
  changePersistentIndexList(before, after);
  emit layoutChanged({}, QAbstractItemModel::VerticalSortHint);
}

}  // namespace ts::gui
