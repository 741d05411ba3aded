# expect: clean
# shape: the twin of ensemble_sum_of_inference_predictions_crash.py that clones the first fold's logits outside inference mode: the sum is an ordinary tensor
import torch
from torch import nn


class Predictor:
    def __init__(self, network, fold_states, device):
        self.network = network
        self.fold_states = fold_states
        self.device = device

    @torch.inference_mode()
    def predict_logits(self, image):
        logits = torch.zeros((2, *image.shape[1:]), device=self.device)
        logits += self.network(image[None])[0]
        return logits

    def predict(self, image):
        prediction = None
        for state in self.fold_states:
            self.network.load_state_dict(state)
            if prediction is None:
                prediction = self.predict_logits(image).to("cpu").clone()
            else:
                prediction += self.predict_logits(image).to("cpu")
        return prediction / len(self.fold_states)


torch.manual_seed(0)
net = nn.Conv2d(1, 2, 3, padding=1)
folds = [{k: v.clone() for k, v in nn.Conv2d(1, 2, 3, padding=1).state_dict().items()} for _ in range(2)]
print(Predictor(net, folds, torch.device("cpu")).predict(torch.randn(1, 8, 8)).shape)
