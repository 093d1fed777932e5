"""pytorch-tutorial's MNIST LSTM with batch_first=True changed to False: loss about 2, accuracy
11%."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/yunjey/pytorch-tutorial/issues/196"
REPORTED = (
    "After changing batch_first=True to False in the tutorial's recurrent network (inputs "
    "still shaped batch, sequence, features), both the loss (about 2) and the accuracy "
    "(about 11.35%) are bad."
)
DIAGNOSIS = (
    "With batch_first=False the LSTM reads the batch dimension as time and the sequence as "
    "the batch, so each prediction mixes rows of different images; the input must be "
    "(sequence, batch, features) or batch_first=True."
)
LABEL = "other_fault"
MODEL = "recurrent"
OPTIMIZER = "Adam"
DATA = (
    "scikit-learn's digits read row by row stand in for MNIST's 28 rows of 28, with two blank "
    "rows added at the bottom as MNIST has a blank border (8 + 2 rows of 8 pixels); the "
    "tutorial's RNN (LSTM, last step to a linear layer), Adam at 0.01, batches of 100."
)
SYMPTOM = Symptom("final_val_acc", below=0.3)  # accuracy near chance (0.1)
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits read as 10 rows of 8 pixels for MNIST's 28 rows of 28"
FIDELITY_MODEL = "stand-in: the tutorial's LSTM at digit width"
FIDELITY_CODE = OWN
REPORTED_EFFECT = "the loss stays about 2 and accuracy about 11.35%"
REENACTED_EFFECT = (
    "the loss ends at 0.997 of its start and accuracy is 0.078; the twin's loss ends at 0.12 "
    "and it validates at 0.908"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 10
sequence_length, input_size, hidden_size, num_layers, num_classes = 10, 8, 64, 1, 10


class RNN(nn.Module):
    """The tutorial's many-to-one LSTM."""

    def __init__(self, *, batch_first: bool) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=batch_first)
        self.fc = nn.Linear(hidden_size, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.fc(out[:, -1, :])


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """The tutorial's loop: images reshaped to (batch, sequence_length, input_size)."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = (
        torch.nn.functional.pad(t.reshape(-1, 8, input_size), (0, 0, 0, 2)) if t.dim() == 2 else t
        for t in kit.digits(seed=SEED)
    )

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return RNN(batch_first=fixed)

    model = make_model()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    train_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_train, y_train), batch_size=100, shuffle=True
    )
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        for images, labels in monitor.batches(train_loader):
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            monitor.step(loss, outputs, labels)
        monitor.log_eval(
            train_acc=kit.accuracy(model, X_train, y_train),
            val_acc=kit.accuracy(model, X_val, y_val),
            val_loss=kit.mean_loss(model, criterion, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=X_train, y=y_train)
