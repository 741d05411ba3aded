# expect: clean
# source: https://github.com/microsoft/tensorwatch/issues/25
import numpy as np
import torch
import torch.nn as nn


class VanillaGradExplainer(object):
    def __init__(self, model):
        self.model = model

    def _backprop(self, inp, ind):
        inp.requires_grad = True
        if inp.grad is not None:
            inp.grad.zero_()
        if ind.grad is not None:
            ind.grad.zero_()
        self.model.eval()
        self.model.zero_grad()

        output = self.model(inp)
        if ind is None:
            ind = output.max(1)[1]
        grad_out = output.clone()
        grad_out.fill_(0.0)
        grad_out.scatter_(1, ind.unsqueeze(0).t(), 1.0)
        output.backward(grad_out)
        return inp.grad

    def explain(self, inp, ind=None, raw_inp=None):
        return self._backprop(inp, ind)


class SaliencyExplainer(VanillaGradExplainer):
    def explain(self, inp, ind=None, raw_inp=None):
        grad = self._backprop(inp, ind)
        return grad.abs()


def _get_layer(model, key_list):
    if key_list is None:
        return None
    a = model
    for key in key_list:
        a = a._modules[key]
    return a


class GradCAMExplainer(VanillaGradExplainer):
    def __init__(self, model, target_layer_name_keys=None, use_inp=False):
        super(GradCAMExplainer, self).__init__(model)
        self.target_layer = _get_layer(model, target_layer_name_keys)
        self.use_inp = use_inp
        self.intermediate_act = []
        self.intermediate_grad = []
        self._register_forward_backward_hook()

    def _register_forward_backward_hook(self):
        def forward_hook_input(m, i, o):
            self.intermediate_act.append(i[0].data.clone())

        def forward_hook_output(m, i, o):
            self.intermediate_act.append(o.data.clone())

        def backward_hook(m, grad_i, grad_o):
            self.intermediate_grad.append(grad_o[0].data.clone())

        if self.use_inp:
            self.handle_forward_hook = self.target_layer.register_forward_hook(forward_hook_input)
        else:
            self.handle_forward_hook = self.target_layer.register_forward_hook(forward_hook_output)
        self.handle_backward_hook = self.target_layer.register_backward_hook(backward_hook)

    def explain(self, inp, ind=None, raw_inp=None):
        self.intermediate_act, self.intermediate_grad = [], []
        _ = super(GradCAMExplainer, self)._backprop(inp, ind)
        self.handle_forward_hook.remove()
        self.handle_backward_hook.remove()
        if len(self.intermediate_grad):
            weights = self.intermediate_grad[0].sum(-1).sum(-1).unsqueeze(-1).unsqueeze(-1)
            cam = (weights * self.intermediate_act[0]).sum(1).unsqueeze(1)
            return torch.clamp(cam, min=0)
        return None


# modified from https://github.com/PAIR-code/saliency/blob/master/saliency/base.py#L80
class SmoothGradExplainer(object):
    def __init__(self, model, base_explainer=None, stdev_spread=0.15,
                 nsamples=25, magnitude=True):
        self.base_explainer = base_explainer or VanillaGradExplainer(model)
        self.stdev_spread = stdev_spread
        self.nsamples = nsamples
        self.magnitude = magnitude

    def explain(self, inp, ind=None, raw_inp=None):
        stdev = self.stdev_spread * (inp.max() - inp.min())
        total_gradients = 0
        for i in range(self.nsamples):
            noise = torch.randn_like(inp) * stdev
            noisy_inp = (inp + noise).detach()
            grad = self.base_explainer.explain(noisy_inp, ind)
            if self.magnitude:
                total_gradients += grad ** 2
            else:
                total_gradients += grad
        return total_gradients / self.nsamples


class ImageSaliencyResult:
    def __init__(self, raw_image, saliency, title, saliency_alpha=0.4, saliency_cmap='jet'):
        self.raw_image, self.saliency, self.title = raw_image, saliency, title
        self.saliency_alpha, self.saliency_cmap = saliency_alpha, saliency_cmap


def _get_explainer(explainer_name, model, layer_path=None):
    if explainer_name == 'gradcam':
        return GradCAMExplainer(model, target_layer_name_keys=layer_path, use_inp=True)
    if explainer_name == 'saliency':
        return SaliencyExplainer(model)
    if explainer_name == 'smooth_grad':
        return SmoothGradExplainer(model, nsamples=8)
    raise ValueError('Explainer {} is not recognized'.format(explainer_name))


def _get_layer_path(model):
    if model.__class__.__name__ == 'ResNet':
        return ['avgpool']
    return None


def get_saliency(model, raw_input, input, label, device=None, method='integrate_grad', layer_path=None):
    if device is None or type(device) != torch.device:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    input = input.to(device)
    if label is not None:
        label = label.to(device)
    if input.grad is not None:
        input.grad.zero_()
    model.eval()
    model.zero_grad()

    layer_path = layer_path or _get_layer_path(model)
    exp = _get_explainer(method, model, layer_path)
    saliency = exp.explain(input, label, raw_input)
    if saliency is not None:
        saliency = saliency.abs().sum(dim=1)[0].squeeze()
        saliency -= saliency.min()
        saliency /= (saliency.max() + 1e-20)
        return saliency.detach().cpu().numpy()
    return None


def get_image_saliency_results(model, raw_image, input, label, device=None,
                               methods=['gradcam', 'smooth_grad'], layer_path=None):
    results = []
    for method in methods:
        sal = get_saliency(model, raw_image, input, label, device=device, method=method)
        if sal is not None:
            results.append(ImageSaliencyResult(raw_image, sal, method))
    return results


class ResNet(nn.Module):
    def __init__(self, num_classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.layer1 = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = x + self.layer1(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


if __name__ == '__main__':
    torch.manual_seed(0)
    model = ResNet()
    img = (np.random.RandomState(0).rand(32, 32, 3) * 255).astype(np.uint8)
    input_tensor = torch.from_numpy(img).float().permute(2, 0, 1).unsqueeze(0) / 255.0
    input_tensor = (input_tensor - 0.5) / 0.25
    model.eval()
    with torch.no_grad():
        prediction_tensor = model(input_tensor).argmax(1)
    results = get_image_saliency_results(model, img, input_tensor, prediction_tensor,
                                         methods=['gradcam', 'smooth_grad'])
    for r in results:
        print(r.title, r.saliency.shape, float(r.saliency.mean()))
