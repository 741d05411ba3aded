# expect: numpy_requires_grad
# source: https://github.com/fedbiomed/fedbiomed/issues/407
"""Node-side training plan: local training followed by validation with a
user-defined ``testing_step`` (Fed-BioMed style TorchTrainingPlan)."""
from abc import ABC, abstractmethod
from typing import Any, Dict, List, Optional, Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class FedbiomedTrainingPlanError(Exception):
    pass


# ----------------------------------------------------------------- utils
def convert_to_python_float(value: Union[torch.Tensor, np.ndarray, float, int]) -> float:
    """Convert a scalar tensor / array / number to a python float."""
    if isinstance(value, torch.Tensor):
        value = value.numpy()  # raises
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise FedbiomedTrainingPlanError("metric values must be scalars")
        value = value.item()
    return float(value)


def convert_iterator_to_list_of_python_floats(iterator) -> List[float]:
    if isinstance(iterator, dict):
        iterator = iterator.values()
    return [convert_to_python_float(v) for v in iterator]


class HistoryMonitor:
    """Collects scalars that are sent back to the researcher."""

    def __init__(self):
        self.records: List[Dict[str, Any]] = []

    def add_scalar(self, metric: Dict[str, float], iteration: int, epoch: Optional[int],
                   test: bool = False, test_on_local_updates: bool = False,
                   test_on_global_updates: bool = False, total_samples: int = 0,
                   batch_samples: int = 0, num_batches: int = 0) -> None:
        self.records.append({"metric": metric, "iteration": iteration, "epoch": epoch,
                             "test": test, "local": test_on_local_updates,
                             "global": test_on_global_updates,
                             "samples": (batch_samples, total_samples)})


# -------------------------------------------------------------- base plan
class BaseTrainingPlan(ABC):
    def __init__(self):
        self.training_data_loader: Optional[DataLoader] = None
        self.testing_data_loader: Optional[DataLoader] = None
        self._training_args = {"log_interval": 2, "epochs": 1, "lr": 0.05}

    def set_data_loaders(self, train_data_loader, test_data_loader):
        self.training_data_loader = train_data_loader
        self.testing_data_loader = test_data_loader

    def training_args(self) -> Dict[str, Any]:
        return self._training_args

    @staticmethod
    def _create_metric_result_dict(metric, metric_name: str = "Custom") -> Dict[str, float]:
        """Create a metrics result dictionary, feedable to a HistoryMonitor."""
        if isinstance(metric, torch.Tensor) and metric.dim() == 0:
            metric = [metric]
        if isinstance(metric, (int, float, np.integer, np.floating)):
            return {metric_name: float(metric)}
        if isinstance(metric, (dict, list, tuple)):
            if isinstance(metric, dict):
                names = list(metric)
            else:
                names = [f"{metric_name}_{i + 1}" for i in range(len(metric))]
            values = convert_iterator_to_list_of_python_floats(metric)
            return dict(zip(names, values))
        raise FedbiomedTrainingPlanError(f"unsupported metric type {type(metric)}")

    @abstractmethod
    def training_routine(self, history_monitor: Optional[HistoryMonitor] = None) -> None:
        ...

    def testing_routine(self, metric, history_monitor: Optional[HistoryMonitor],
                        before_train: bool) -> None:
        """Evaluation routine, to be called once per round."""
        if self.testing_data_loader is None:
            raise FedbiomedTrainingPlanError("no validation dataset was set.")
        n_samples = len(self.testing_data_loader.dataset)
        n_batches = max(len(self.testing_data_loader), 1)

        if hasattr(self, "testing_step"):
            evaluate = getattr(self, "testing_step")
            metric_name = "Custom"
        else:
            def evaluate(data, target):
                output = self.predict(data)
                return (output.argmax(1) == target).float().mean()
            metric_name = "ACCURACY"

        seen = 0
        for idx, (data, target) in enumerate(self.testing_data_loader, 1):
            seen += len(data)
            try:
                m_value = evaluate(data, target)
            except Exception as exc:
                raise FedbiomedTrainingPlanError(
                    f"An error occurred while computing the {metric_name} metric: {exc}") from exc
            if idx % self.training_args()["log_interval"] == 0 or idx == 1 or idx == n_batches:
                print(f"Validation: Batch {idx}/{n_batches} | Metric[{metric_name}]: {m_value}")
                if history_monitor is not None:
                    m_dict = self._create_metric_result_dict(m_value, metric_name)
                    history_monitor.add_scalar(
                        metric=m_dict, iteration=idx, epoch=None, test=True,
                        test_on_local_updates=(not before_train),
                        test_on_global_updates=before_train, total_samples=n_samples,
                        batch_samples=seen, num_batches=n_batches)


# --------------------------------------------------------- torch backend
class TorchTrainingPlan(BaseTrainingPlan):
    def __init__(self):
        super().__init__()
        self._model: Optional[nn.Module] = None
        self._optimizer: Optional[torch.optim.Optimizer] = None

    def post_init(self, model_args: Dict[str, Any]) -> None:
        self._model = self.init_model(model_args)
        self._optimizer = torch.optim.SGD(self._model.parameters(), lr=self._training_args["lr"])

    def model(self) -> nn.Module:
        return self._model

    def predict(self, data: torch.Tensor) -> torch.Tensor:
        self._model.eval()
        with torch.no_grad():
            return self._model(data)

    def training_routine(self, history_monitor: Optional[HistoryMonitor] = None) -> None:
        self._model.train()
        for epoch in range(1, self._training_args["epochs"] + 1):
            for idx, (data, target) in enumerate(self.training_data_loader, 1):
                self._optimizer.zero_grad()
                loss = self.training_step(data, target)
                loss.backward()
                self._optimizer.step()
                if history_monitor is not None:
                    history_monitor.add_scalar({"Loss": loss.item()}, iteration=idx, epoch=epoch)


# ------------------------------------------------------ researcher's plan
class MyTrainingPlan(TorchTrainingPlan):
    def init_model(self, model_args):
        return nn.Sequential(nn.Flatten(), nn.Linear(model_args["in_features"], 32),
                             nn.ReLU(), nn.Linear(32, model_args["num_classes"]),
                             nn.LogSoftmax(dim=1))

    def training_step(self, data, target):
        output = self.model()(data)
        return F.nll_loss(output, target)

    def testing_step(self, data, target):
        output = self.model()(data)
        loss1 = F.nll_loss(output, target)
        loss2 = F.nll_loss(output, target, reduction="mean")
        acc = (output.argmax(1) == target).float().mean()
        return [loss1, loss2, acc]


def make_loaders(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(96, 1, 6, 6, generator=g)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    train = TensorDataset(x[:64], y[:64])
    test = TensorDataset(x[64:], y[64:])
    return (DataLoader(train, batch_size=16, shuffle=False),
            DataLoader(test, batch_size=32, shuffle=False))


def run_round(plan: BaseTrainingPlan, monitor: HistoryMonitor) -> None:
    plan.training_routine(history_monitor=monitor)
    plan.testing_routine(metric=None, history_monitor=monitor, before_train=False)


if __name__ == "__main__":
    torch.manual_seed(0)
    plan = MyTrainingPlan()
    plan.post_init({"in_features": 36, "num_classes": 2})
    plan.set_data_loaders(*make_loaders())
    monitor = HistoryMonitor()
    run_round(plan, monitor)
    print("records sent:", len(monitor.records))
    print(monitor.records[-1]["metric"])
