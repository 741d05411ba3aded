# expect: clean
# source: https://github.com/huggingface/transformers/pull/14204
"""Image-segmentation pipeline in the style of transformers' Pipeline base
class (preprocess -> _forward under the framework's inference context ->
postprocess) wrapping a tiny DETR-like panoptic model whose feature
extractor post-processes predicted masks in place."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class DetrConfig:
    num_queries = 6
    num_labels = 4
    hidden = 16
    mask_size = 8
    threshold = 0.3


class DetrForSegmentation(nn.Module):
    def __init__(self, cfg: DetrConfig):
        super().__init__()
        self.cfg = cfg
        self.backbone = nn.Sequential(nn.Conv2d(3, cfg.hidden, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(cfg.mask_size))
        self.query_embed = nn.Embedding(cfg.num_queries, cfg.hidden)
        self.class_embed = nn.Linear(cfg.hidden, cfg.num_labels + 1)
        self.mask_head = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, pixel_values):
        feats = self.backbone(pixel_values)                        # [B, H, m, m]
        b = feats.shape[0]
        q = self.query_embed.weight.unsqueeze(0).expand(b, -1, -1)  # [B, Q, H]
        pooled = feats.flatten(2).mean(-1).unsqueeze(1)            # [B, 1, H]
        hs = torch.tanh(q + pooled)
        logits = self.class_embed(hs)
        pred_masks = torch.einsum("bqh,bhxy->bqxy", self.mask_head(hs), feats)
        return {"logits": logits, "pred_masks": pred_masks}


class DetrFeatureExtractor:
    def __init__(self, size=32):
        self.size = size
        self.mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        self.std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def __call__(self, images):
        batch = [F.interpolate(im.unsqueeze(0), size=(self.size, self.size), mode="bilinear",
                               align_corners=False)[0] for im in images]
        return {"pixel_values": (torch.stack(batch) - self.mean) / self.std}

    def post_process_segmentation(self, outputs, target_sizes, threshold=0.9, mask_threshold=0.5):
        out_logits, raw_masks = outputs["logits"], outputs["pred_masks"]
        preds = []
        for cur_logits, cur_masks, size in zip(out_logits, raw_masks, target_sizes):
            cur_masks.sigmoid_()
            scores, cur_labels = cur_logits.softmax(-1).max(-1)
            keep = cur_labels.ne(out_logits.shape[-1] - 1) & (scores > threshold)
            cur_scores, cur_labels, cur_masks = scores[keep], cur_labels[keep], cur_masks[keep]
            cur_masks = F.interpolate(cur_masks[:, None], size=tuple(size), mode="bilinear").squeeze(1)
            cur_masks = (cur_masks > mask_threshold) * 1
            preds.append({"scores": cur_scores, "labels": cur_labels, "masks": cur_masks})
        return preds


class Pipeline:
    def __init__(self, model, feature_extractor):
        self.model = model.eval()
        self.feature_extractor = feature_extractor

    def get_inference_context(self):
        return torch.inference_mode

    def forward(self, model_inputs, **forward_params):
        with self.get_inference_context()():
            model_outputs = self._forward(model_inputs, **forward_params)
        return model_outputs

    def __call__(self, inputs, **kwargs):
        model_inputs = self.preprocess(inputs)
        model_outputs = self.forward(model_inputs)
        return self.postprocess(model_outputs, **kwargs)


class ImageSegmentationPipeline(Pipeline):
    def get_inference_context(self):
        return torch.no_grad

    def preprocess(self, images):
        target_size = torch.IntTensor([[im.shape[1], im.shape[2]] for im in images])
        inputs = self.feature_extractor(images)
        inputs["target_size"] = target_size
        return inputs

    def _forward(self, model_inputs):
        target_size = model_inputs.pop("target_size")
        outputs = self.model(**model_inputs)
        outputs["target_size"] = target_size
        return outputs

    def postprocess(self, model_outputs, threshold=0.3, mask_threshold=0.5):
        outputs = self.feature_extractor.post_process_segmentation(
            model_outputs, model_outputs["target_size"], threshold=threshold, mask_threshold=mask_threshold)
        annotation = []
        for res in outputs:
            for score, label, mask in zip(res["scores"], res["labels"], res["masks"]):
                annotation.append({"score": round(float(score), 4), "label": int(label),
                                   "mask_area": int(mask.sum())})
        return annotation


def pipeline(task, model=None, feature_extractor=None):
    if task != "image-segmentation":
        raise KeyError(f"Unknown task {task}")
    return ImageSegmentationPipeline(model, feature_extractor)


def main():
    torch.manual_seed(0)
    cfg = DetrConfig()
    segmenter = pipeline("image-segmentation", model=DetrForSegmentation(cfg),
                         feature_extractor=DetrFeatureExtractor())
    images = [torch.rand(3, 40, 48), torch.rand(3, 36, 36)]
    results = segmenter(images, threshold=0.15)
    for r in results:
        print(r)
    print(f"{len(results)} segments")


if __name__ == "__main__":
    main()
